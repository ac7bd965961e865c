"""A small TCP balancer process the failover tests control: a virtual address in front of PostgreSQL nodes or of
several `metaservice serve` replicas.

New connections go to the current targets in turn (round robin, no stickiness); connections already open stay
with the target they were opened to, as with a proxy or a virtual IP that moves. Commands:

- `point(*targets)`: where new connections go from now on (a failover moves the address: at once, or late);
- `vanish()`: the host behind the address is gone without closing anything: every open connection stops
  forwarding in both directions and stays open, and new connections are accepted and then hear nothing (a
  network cut, a dead machine) until the next `point()`; the connections cut stay cut.

It is a process of its own (`python -m tests.failover.balancer`) so that the test's client threads never slow the
forwarding down; `Balancer` sends it one JSON command per line on stdin and reads one JSON answer per line.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.support import free_port

_CHUNK = 65536
_REPO = Path(__file__).resolve().parents[2]


class Balancer:
    """Controls a balancer process on 127.0.0.1:`port` (see the module docstring)."""

    def __init__(self, *targets: int, port: int | None = None) -> None:
        self.port = port or free_port()
        self._targets = targets
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def start(self) -> Balancer:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.failover.balancer", "--port", str(self.port)],
            cwd=_REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.point(*self._targets)  # answers once it listens
        return self

    def close(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=10)
        self._process.stdout.close()

    def __enter__(self) -> Balancer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def point(self, *ports: int) -> None:
        """New connections go to 127.0.0.1:`ports` in turn from now on."""
        self._command("point", list(ports))

    def vanish(self) -> int:
        """Stop forwarding on every open connection (and hold new ones silent) without closing any; returns how
        many connections were cut."""
        return int(self._command("vanish"))

    @property
    def opened(self) -> int:
        """Connections accepted so far."""
        return int(self._command("opened"))

    def _command(self, name: str, argument: Any = None) -> Any:
        with self._lock:
            process = self._process
            if process is None or process.stdin is None or process.stdout is None:
                raise RuntimeError("the balancer is not running")
            process.stdin.write(json.dumps({"command": name, "argument": argument}) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the balancer process exited ({process.poll()}) during {name!r}")
        return json.loads(line)["value"]


# --- the balancer process --------------------------------------------------------------------------------------


class _Forwarder:
    def __init__(self) -> None:
        self.targets: itertools.cycle[int] | None = None
        self.cut = asyncio.Event()  # set: the current generation of connections is cut
        self.opened = 0
        self.live = 0  # connections forwarding now

    def handle(self, command: str, argument: Any) -> Any:
        if command == "point":
            ports = [int(p) for p in argument]
            self.targets = itertools.cycle(ports) if ports else None
            self.cut = asyncio.Event()  # connections opened from now on are not cut
            return None
        if command == "vanish":
            self.targets = None
            self.cut.set()
            cut, self.live = self.live, 0
            return cut
        if command == "opened":
            return self.opened
        raise ValueError(f"unknown command {command!r}")

    async def serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        cut = self.cut
        if self.targets is None or cut.is_set():  # nobody answers at this address: hold the connection silent
            await asyncio.Event().wait()
            return
        port = next(self.targets)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            client_writer.transport.abort()  # refused: the host is up but nothing listens
            return
        self.live += 1
        try:
            await asyncio.gather(
                self._pipe(client_reader, upstream_writer, cut),
                self._pipe(upstream_reader, client_writer, cut),
                return_exceptions=True,
            )
        finally:
            if not cut.is_set():
                self.live -= 1
                for writer in (client_writer, upstream_writer):
                    writer.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event) -> None:
        while data := await reader.read(_CHUNK):
            if cut.is_set():
                await asyncio.Event().wait()  # the host is gone: bytes are lost, nothing is closed
            writer.write(data)
            await writer.drain()
        if cut.is_set():
            await asyncio.Event().wait()
        writer.transport.abort()  # one side closed: close the other, as a router passes the FIN on


async def _main(port: int) -> None:
    forwarder = _Forwarder()
    server = await asyncio.start_server(forwarder.serve, "127.0.0.1", port, backlog=1024)
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    while line := await commands.readline():
        request = json.loads(line)
        value = forwarder.handle(request["command"], request.get("argument"))
        sys.stdout.write(json.dumps({"value": value}) + "\n")
        sys.stdout.flush()
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(_main(parser.parse_args().port))


if __name__ == "__main__":
    main()
