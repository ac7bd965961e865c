"""The database figures of /metrics, read and rendered by a process of their own beside each server process.

The figures (every table's delay and lag, every job's lag and last run, run counts) cost Python in proportion to
the catalog: at 100,000 tables a refresh rebuilt 190,000 figures every 5 s (0.25 s), a process's first read took
about 3 s and a scrape rendered a million samples. In the server process all of that competed with the protocol's
requests for the one interpreter lock, however it was threaded: `POST /versions` p99 34-69 ms in steady state and
over 0.6 s after a start, against 3.5 ms on 100 tables (docs/measurements.md). Here it runs in a child process on
its own connection, at a lower CPU priority, and the server only copies the child's rendering into a scrape.

The child (`python -m metaservice.metrics_process`) reads its settings as one JSON line on stdin, reads what
changed (`services/metric_state.py`) every `metrics_refresh_seconds`, and answers requests on stdin with frames on
stdout: the server writes the sequence number of the rendering it holds; the child answers `<seq> <length>\\n`
followed by `length` bytes of Prometheus text, or a length of 0 when the server's copy is still the newest (the
figures are built and rendered once per read, when first asked for). The child ends when its stdin closes: the
server stopped, or died (`kill -9`), so no child outlives its server; it runs in a session of its own, so signals
meant for the server do not reach it. The server starts a new child when one dies, and serves its last copy
meanwhile; `metaservice_figures_read_timestamp_seconds` tells how old it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import IO, Any

from pydantic import SecretStr

from metaservice.db.database import Database
from metaservice.db.transaction import in_transaction
from metaservice.observability import configure_logging, render_database_figures
from metaservice.services.metric_state import MetricState
from metaservice.settings import Settings

logger = logging.getLogger("metaservice.metrics")

NICE = 10  # the figures yield the CPU to the server and PostgreSQL (a lower priority; 0 keeps the server's)
RESTART_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)  # seconds before starting a child again after one died
ANSWER_TIMEOUT = 20.0  # longest a scrape waits for the child's rendering before serving the copy it holds


# --- the server's side ---------------------------------------------------------------------------------------


class FiguresProcess:
    """The child that reads and renders the database figures, seen from the server process (see the module
    docstring). `running()` keeps one alive; `rendering()` is the database part of a scrape."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._process: asyncio.subprocess.Process | None = None
        self._exchange: asyncio.Task[bytes] | None = None
        self._seq = -1  # the child's sequence number of `_body` (-1: none yet)
        self._body = b""
        self._ready = asyncio.Event()  # a child is up and has its settings
        self.restarts = 0  # children started after the first (tests, logs)

    @property
    def pid(self) -> int | None:
        """The child's process id (None while none runs)."""
        return None if self._process is None or self._process.returncode is not None else self._process.pid

    async def rendering(self) -> bytes:
        """The database part of a scrape: the child's newest rendering, or the last one held when the child is away
        or slow (empty before its first read). Concurrent scrapes share one exchange with the child."""
        if self._exchange is None or self._exchange.done():
            self._exchange = asyncio.create_task(self._ask(), name="metaservice-figures-ask")
        try:
            return await asyncio.wait_for(asyncio.shield(self._exchange), ANSWER_TIMEOUT)
        except TimeoutError:
            logger.warning(
                "the figures process did not answer within %s s: serving the figures last read, starting another",
                ANSWER_TIMEOUT,
            )
            if self._process is not None and self._process.returncode is None:
                self._process.kill()  # the supervisor starts another
            return self._body
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:  # it ended, or spoke nonsense
            logger.warning("the figures process did not answer (%r): serving the figures last read", exc)
            return self._body

    async def _ask(self) -> bytes:
        process = self._process
        if process is None or process.returncode is not None or not self._ready.is_set():
            return self._body
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(b"%d\n" % self._seq)
        await process.stdin.drain()
        header = await process.stdout.readline()
        if not header:
            raise ConnectionError("the figures process ended")
        seq, length = header.split()
        if int(length):
            self._body = await process.stdout.readexactly(int(length))
        self._seq = int(seq)
        return self._body

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Keep a child running while the server runs; stop it (by closing its stdin) when the server stops."""
        supervisor = asyncio.create_task(self._supervise(), name="metaservice-figures")
        try:
            yield
        finally:
            supervisor.cancel()
            await asyncio.gather(supervisor, return_exceptions=True)
            if self._exchange is not None:
                self._exchange.cancel()
                await asyncio.gather(self._exchange, return_exceptions=True)
            await self._stop()

    async def _supervise(self) -> None:
        failures = 0
        while True:
            started = time.monotonic()
            try:
                await self._start()
                assert self._process is not None
                code = await self._process.wait()
            except OSError as exc:  # the interpreter could not be started (no memory, no process slots)
                code = None
                logger.warning("could not start the figures process: %s", exc)
            self._ready.clear()
            if code is not None:
                logger.warning("the figures process ended (exit status %s): starting another", code)
            failures = 0 if time.monotonic() - started > 60 else failures + 1
            await asyncio.sleep(RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)])
            self.restarts += 1

    async def _start(self) -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "metaservice.metrics_process",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 20,
            # Not in the server's process group: a SIGTERM to the group (a service manager stopping the server)
            # would end the child first, and the server would start another while stopping.
            start_new_session=True,
        )
        self._process, self._seq = process, -1
        assert process.stdin is not None
        process.stdin.write(json.dumps(child_settings(self._settings)).encode() + b"\n")
        await process.stdin.drain()
        self._ready.set()

    async def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        assert process.stdin is not None
        process.stdin.close()  # the child ends at the end of its input
        try:
            await asyncio.wait_for(process.wait(), 5)
        except TimeoutError:
            process.kill()
            await process.wait()


def child_settings(settings: Settings) -> dict[str, Any]:
    """The server's settings for its figures process, as JSON: secrets left out (the child talks only to the
    database), one connection."""
    data = settings.model_dump(mode="json")
    for name in list(data):
        if isinstance(getattr(settings, name), SecretStr):
            del data[name]
    return {**data, "pool_size": 1, "pool_min_size": 1}


# --- the child's side ----------------------------------------------------------------------------------------


class _Figures:
    """What the child holds: the kept inputs of the figures, read every `interval`, and the newest rendering. The
    figures are built and rendered only when a scrape asks, once per read (Python in proportion to the catalog:
    without scrapes the child only reads what changed)."""

    def __init__(self, settings: Settings) -> None:
        self.database = Database(settings, application_name="metaservice-figures")
        self.state = MetricState()
        self.interval = settings.metrics_refresh_seconds
        self.seq = 0  # bumped by every read
        self._read_at: float | None = None  # when the kept state was read (Unix time); None: it is not usable
        self._rendered: tuple[int, bytes] = (0, b"")

    async def read(self) -> None:
        started = time.time()
        self._read_at = None  # a read cut short leaves nothing to build from (`MetricState` forgets it)
        try:
            await in_transaction(self.database, self.state.read, isolation="REPEATABLE READ", read_only=True)
        except BaseException:
            self.state.invalidate()  # an outage may have cut the read short: read everything next time
            raise
        self._read_at = started
        self.seq += 1

    async def reading(self) -> None:
        while True:
            try:
                await self.read()
            except Exception as exc:  # the database may be away; keep the last rendering and try again
                logger.warning("metrics refresh failed: %s", exc)
            await asyncio.sleep(self.interval)

    def rendered(self) -> tuple[int, bytes]:
        """The newest rendering and its sequence number: that of the last read, built now if it was not yet, or
        the last one made when the last read failed."""
        if self._rendered[0] != self.seq and self._read_at is not None:
            self._rendered = (self.seq, render_database_figures(self.state.figures(), self._read_at))
        return self._rendered


async def _serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), requests)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, answers)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    first = await reader.readline()
    if not first:
        return  # the server stopped before it sent the settings
    settings = Settings.model_validate(json.loads(first))
    configure_logging(settings)
    figures = _Figures(settings)
    await figures.database.pool.open(wait=False)  # the refreshes wait for connections, and log their failures
    refreshing = asyncio.create_task(figures.reading(), name="metaservice-figures-read")
    try:
        while line := await reader.readline():  # the end of the input: the server is gone
            seq, body = figures.rendered()
            if seq == int(line):
                body = b""
            writer.write(b"%d %d\n" % (seq, len(body)))
            writer.write(body)
            await writer.drain()
    finally:
        refreshing.cancel()
        await asyncio.gather(refreshing, return_exceptions=True)
        await figures.database.pool.close(timeout=2)


def main() -> None:
    """The child's entry point (see the module docstring)."""
    # It ends when its input closes, however its server ends: signals meant for the server are not for it (it runs
    # in a session of its own, so a terminal's Ctrl-C or a signal to the server's process group does not reach it).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICE)
    # The frames go to a private copy of stdout; whatever else writes to stdout goes to stderr instead of into them.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    asyncio.run(_serve(sys.stdin.buffer, answers))


if __name__ == "__main__":
    main()
