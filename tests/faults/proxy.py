"""A small TCP proxy process between MetaService and PostgreSQL that injects network faults on command.

It listens on 127.0.0.1 and forwards every connection to the test PostgreSQL (its unix socket, or its TCP
address when `METASERVICE_TEST_DATABASE_URL` names one). Faults:

- `drop()`: reset every open connection at once (a network blip, a firewall or NAT flushing its table);
- `refuse()` / `heal()`: accept and immediately reset new connections (PostgreSQL unreachable);
- `cut_after(marker)`: once, forward a chunk containing `marker`, wait until the database has answered it
  (ReadyForQuery: the statement ran, and in autocommit committed), then reset the server's side of that
  connection instead of passing the answer on. The fault is decided by what the database answered, never by
  timing: the database surely finished, and the server surely never hears how;
- `latency(seconds)`: hold every chunk that long before forwarding it, in both directions;
- `partition()` / `heal()`: keep connections open but forward nothing (packets silently lost); on heal the
  held bytes are delivered.

The proxy is a real process of its own (`python -m tests.faults.proxy`), so that the test's client threads
never slow the forwarding down. `FaultProxy` starts it and sends it one JSON command per line on stdin; the
process answers each with one JSON line on stdout. The controls are safe to call from any thread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from tests.support import free_port

_CHUNK = 65536
_REPO = Path(__file__).resolve().parents[2]
# The simple-protocol message that commits a transaction: message type Q, int32 length 11, COMMIT, NUL.
# (Matching the bare word would also match "BEGIN ISOLATION LEVEL READ COMMITTED".)
COMMIT_MESSAGE = b"Q\x00\x00\x00\x0bCOMMIT\x00"
# ReadyForQuery: message type Z, int32 length 5 (then the transaction status): the database finished a request.
READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


@dataclass(frozen=True)
class Upstream:
    """Where PostgreSQL listens: a unix socket path, or a TCP host and port."""

    unix_path: str | None = None
    host: str | None = None
    port: int = 5432
    user: str = "postgres"
    password: str | None = None

    @classmethod
    def of(cls, url: str) -> Upstream:
        """The upstream of a libpq URL such as the tests' admin URL."""
        info = conninfo_to_dict(url)
        host = str(info.get("host") or "/tmp")
        port = int(info.get("port") or 5432)
        user = str(info.get("user") or "postgres")
        password = str(info["password"]) if info.get("password") else None
        if host.startswith("/"):
            return cls(unix_path=f"{host}/.s.PGSQL.{port}", port=port, user=user, password=password)
        return cls(host=host, port=port, user=user, password=password)

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.unix_path is not None:
            return await asyncio.open_unix_connection(self.unix_path)
        assert self.host is not None
        return await asyncio.open_connection(self.host, self.port)


class FaultProxy:
    """Controls a proxy process 127.0.0.1:`port` → PostgreSQL with injectable faults (see the module docstring).

    Example:
        with FaultProxy(Upstream.of(admin_url)) as proxy:
            url = proxy.route(database_url)  # give this URL to the server
            proxy.drop()                 # every server connection is reset
    """

    def __init__(self, upstream: Upstream, *, port: int | None = None) -> None:
        self.upstream = upstream
        self.port = port or free_port()
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def start(self) -> FaultProxy:
        target = self.upstream.unix_path or f"{self.upstream.host}:{self.upstream.port}"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.proxy", "--port", str(self.port), "--upstream", target],
            cwd=_REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._command("ping")  # answers once it listens
        return self

    def close(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.close()  # end of commands: the process exits
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=10)
        self._process.stdout.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def url(self, database: str) -> str:
        """A libpq URL for `database` that goes through the proxy."""
        secret = f":{self.upstream.password}" if self.upstream.password else ""
        return f"postgresql://{self.upstream.user}{secret}@127.0.0.1:{self.port}/{database}"

    def route(self, database_url: str) -> str:
        """`database_url` (a database on the proxied server) rewritten to go through the proxy."""
        return self.url(str(conninfo_to_dict(database_url)["dbname"]))

    def drop(self) -> int:
        """Reset every open connection now; returns how many were open."""
        return int(self._command("drop"))

    def refuse(self) -> None:
        """Reset new connections as soon as they are accepted, until `heal()`."""
        self._command("refuse")

    def cut_after(self, marker: bytes) -> None:
        """Once: forward the next client chunk containing `marker`; when the database has answered it
        (ReadyForQuery), reset the client's side of that connection instead of forwarding the answer.

        The statement carrying `marker` ran to its end (an autocommit write committed; with `COMMIT_MESSAGE`, a
        transaction committed) and the server never learns it did: the one failure whose outcome the server
        cannot know without asking again.
        """
        self._command("cut_after", marker.hex())

    def latency(self, seconds: float) -> None:
        """Delay every forwarded chunk by `seconds` (0: none)."""
        self._command("latency", seconds)

    def partition(self) -> None:
        """Forward nothing (connections stay open, bytes are held) until `heal()`."""
        self._command("partition")

    def heal(self) -> None:
        """End every fault: accept and forward again, without added latency or pending cut."""
        self._command("heal")

    @property
    def cuts(self) -> int:
        """How many connections `cut_after` has cut so far."""
        return int(self._command("cuts"))

    def _command(self, name: str, argument: Any = None) -> Any:
        with self._lock:
            process = self._process
            if process is None or process.stdin is None or process.stdout is None:
                raise RuntimeError("the proxy is not running")
            process.stdin.write(json.dumps({"command": name, "argument": argument}) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the proxy process exited ({process.poll()}) during {name!r}")
        return json.loads(line)["value"]


# --- the proxy process -----------------------------------------------------------------------------------------


class _Forwarder:
    """The asyncio side: accepts, forwards and breaks connections as commanded."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.writers: set[asyncio.StreamWriter] = set()
        self.refusing = False
        self.delay = 0.0
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.cut_marker: bytes | None = None
        self.cutting: set[asyncio.StreamWriter] = set()  # client writers whose next answer is swallowed
        self.cuts = 0

    def handle(self, command: str, argument: Any) -> Any:
        if command == "drop":
            writers = list(self.writers)
            for writer in writers:
                writer.transport.abort()
            self.writers.clear()
            return len(writers) // 2
        if command == "refuse":
            self.refusing = True
        elif command == "cut_after":
            self.cut_marker = bytes.fromhex(str(argument))
        elif command == "latency":
            self.delay = float(argument)
        elif command == "partition":
            self.flowing.clear()
        elif command == "heal":
            self.refusing, self.delay, self.cut_marker = False, 0.0, None
            self.flowing.set()
        elif command == "cuts":
            return self.cuts
        elif command != "ping":
            raise ValueError(f"unknown command {command!r}")
        return None

    async def serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            client_writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await self.upstream.connect()
        except OSError:
            client_writer.transport.abort()
            return
        pair = (client_writer, upstream_writer)
        self.writers.update(pair)
        try:
            await asyncio.gather(
                self._pipe(client_reader, upstream_writer, cut=pair),
                self._answers(upstream_reader, client_writer),
                return_exceptions=True,
            )
        finally:
            for writer in pair:
                self.writers.discard(writer)
                writer.transport.abort()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        cut: tuple[asyncio.StreamWriter, ...] = (),
    ) -> None:
        while data := await reader.read(_CHUNK):
            if self.delay > 0:
                await asyncio.sleep(self.delay)  # the injected fault itself, not synchronisation
            await self.flowing.wait()
            if writer.transport.is_closing():
                return
            if cut and self.cut_marker is not None and self.cut_marker in data:
                self.cut_marker = None
                self.cutting.add(cut[0])  # the answers pipe swallows the answer and resets the client
            writer.write(data)
            await writer.drain()
        writer.transport.abort()  # one side closed: close the other, as a router passes the FIN on

    async def _answers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The database → server pipe; for a connection being cut, holds the answer back until it is complete
        (ReadyForQuery), then resets the server's side without passing it on."""
        held = b""
        while data := await reader.read(_CHUNK):
            if self.delay > 0:
                await asyncio.sleep(self.delay)  # the injected fault itself, not synchronisation
            await self.flowing.wait()
            if writer.transport.is_closing():
                return
            if writer in self.cutting:
                held += data
                if READY_FOR_QUERY in held:
                    self.cutting.discard(writer)
                    self.cuts += 1
                    writer.transport.abort()
                    return
                continue
            writer.write(data)
            await writer.drain()
        writer.transport.abort()


async def _main(port: int, upstream: Upstream) -> None:
    forwarder = _Forwarder(upstream)
    server = await asyncio.start_server(forwarder.serve, "127.0.0.1", port)
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    while line := await commands.readline():
        request = json.loads(line)
        value = forwarder.handle(request["command"], request.get("argument"))
        sys.stdout.write(json.dumps({"value": value}) + "\n")
        sys.stdout.flush()
    server.close()
    forwarder.handle("drop", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="a unix socket path, or host:port")
    options = parser.parse_args()
    if options.upstream.startswith("/"):
        upstream = Upstream(unix_path=options.upstream)
    else:
        host, _, port = options.upstream.rpartition(":")
        upstream = Upstream(host=host, port=int(port))
    asyncio.run(_main(options.port, upstream))


if __name__ == "__main__":
    main()
