"""What the orchestrator suites share (integrations/*/tests): the real server they are pointed at, a pipeline
driven through its HTTP API the way the client library drives it, and a proxy that makes the server look down
or busy.

tests/test_integrations.py starts the real server (embedded PostgreSQL) and runs each suite in its own
virtualenv with `METASERVICE_TEST_URL` set. Every pipeline gets names of its own, so tests never share tables.

    orders ──► enrich ──► mart.a
       └─────► audit  ──► mart.b       (a and b are consistent together once both jobs committed a barrier)
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

URL_ENV = "METASERVICE_TEST_URL"


def server_url() -> str:
    url = os.environ.get(URL_ENV)
    if not url:
        raise RuntimeError(f"{URL_ENV} is not set: these tests run from tests/test_integrations.py (make test)")
    return url


class Chain:
    """Two jobs reading one root table, each writing one table: `a` and `b` are consistent at a barrier once
    both jobs committed it."""

    def __init__(self, api: httpx.Client) -> None:
        uid = uuid.uuid4().hex[:10]
        self.api = api
        self.root = f"lake.raw_{uid}.orders"
        self.a, self.b = f"lake.mart_{uid}.a", f"lake.mart_{uid}.b"
        self.jobs = {f"enrich_{uid}": self.a, f"audit_{uid}": self.b}
        self.round = 0
        for job, sink in self.jobs.items():
            for role, table in (("source", self.root), ("sink", sink)):
                answer = api.post(f"/register/{role}/{job}/{table.replace('.', '/')}")
                assert answer.status_code in (200, 201), answer.text

    @property
    def tables(self) -> list[str]:
        return [self.a, self.b]

    def start(self) -> int:
        """New root data: the first job processes and commits the new barrier, the second not yet (so `a` and
        `b` are not consistent at it). Returns the barrier."""
        self.round += 1
        first = next(iter(self.jobs))
        return self._step(first)

    def finish(self) -> tuple[int, dict[str, int]]:
        """The second job commits the barrier `start` began: `a` and `b` are consistent at it now."""
        barrier = self._step(list(self.jobs)[1])
        return barrier, self.snapshots()

    def commit_round(self) -> tuple[int, dict[str, int]]:
        """A new barrier, committed by both jobs: the new consistent version and its snapshots."""
        self.start()
        return self.finish()

    def snapshots(self) -> dict[str, int]:
        """The snapshot ids of this round (both jobs write round * 10 + their index)."""
        return {self.a: self.round * 10, self.b: self.round * 10 + 1}

    def _step(self, job: str) -> int:
        sink = self.jobs[job]
        body = {"root_snapshots": {self.root: self.round}}
        decision = self.api.post(f"/jobs/{job}/barriers/next", json=body)
        assert decision.status_code == 200, decision.text
        answer = decision.json()
        assert answer["action"] == "process", answer
        snapshot = self.snapshots()[sink]
        commit = self.api.post(f"/jobs/{job}/barriers/{answer['barrier']}/commit", json={"snapshots": {sink: snapshot}})
        assert commit.status_code == 200, commit.text
        return int(answer["barrier"])

    def snapshot_at(self, table: str, barrier: int) -> int:
        """The snapshot of `table` at `barrier`, as the server recorded it."""
        answer = self.api.get(f"/tables/{table.replace('.', '/')}/barriers", params={"limit": 100})
        assert answer.status_code == 200, answer.text
        for piece in answer.json()["ranges"]:
            last = piece["last_barrier"]
            if piece["first_barrier"] <= barrier and (last is None or barrier <= last):
                return int(piece["snapshot_id"])
        raise AssertionError(f"{table} holds no snapshot at barrier {barrier}")

    def newest_barrier(self, table: str) -> int:
        """The newest barrier `table` completed."""
        answer = self.api.get(f"/tables/{table.replace('.', '/')}")
        assert answer.status_code == 200, answer.text
        return int(answer.json()["newest_complete_barrier"])


def version_waiters(api: httpx.Client) -> int:
    """Reads waiting on the server now (`metaservice_version_waiters` in /metrics)."""
    answer = api.get("/metrics")
    assert answer.status_code == 200, answer.text
    for line in answer.text.splitlines():
        if line.startswith("metaservice_version_waiters"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError("metaservice_version_waiters is not in /metrics")


def when_waiting(api: httpx.Client, action: Any, *, waiters: int = 1, timeout: float = 600) -> threading.Thread:
    """Run `action` in a thread as soon as at least `waiters` reads wait on the server (a long poll is parked),
    so that it provably happens while the orchestrator waits."""
    failure: list[BaseException] = []

    def body() -> None:
        try:
            deadline = time.monotonic() + timeout
            while version_waiters(api) < waiters:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no {waiters} waiting read(s) on the server within {timeout}s")
                time.sleep(0.02)  # polling a real condition (the server's gauge), with a deadline
            action()
        except BaseException as exc:
            failure.append(exc)
            raise

    thread = threading.Thread(target=body, daemon=True)
    thread.failure = failure  # type: ignore[attr-defined]
    thread.start()
    return thread


class FlakyProxy:
    """A TCP proxy in front of the real server that can refuse connections (the server is down) or answer 503
    (it is restarting) until told to forward again. It counts the requests it refused or answered 503, so a
    test decides by what happened, not by time."""

    def __init__(self, upstream: str) -> None:
        url = httpx.URL(upstream)
        self.upstream = (url.host, url.port or 80)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.mode = "forward"  # "forward", "503", "down"
        self.refused = 0
        self.unavailable = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._changed = threading.Condition()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_mode(self, mode: str) -> None:
        """ "down": every connection is closed unanswered (as a crashed server's would be); "503": every request is
        answered 503; "forward": to the server. "closed": nothing listens on the port any more."""
        asyncio.run_coroutine_threadsafe(self._set_mode(mode), self._loop).result(timeout=10)

    async def _set_mode(self, mode: str) -> None:
        self.mode = mode
        if mode == "closed":
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
                self._server = None
        elif self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)

    def wait_for(self, predicate: Any, timeout: float = 60) -> None:
        """Block until `predicate(self)` holds (the proxy notifies on every request it refuses or answers)."""
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self), timeout=timeout):
                raise TimeoutError(f"proxy: condition not met within {timeout}s (mode {self.mode})")

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.mode == "down":
                self.refused += 1
                self._notify()
                return
            if self.mode == "503":
                await reader.readuntil(b"\r\n\r\n")
                body = b'{"type":"/problems/unavailable","status":503,"code":"unavailable","detail":"restarting"}'
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n"
                    b"Retry-After: 0\r\nConnection: close\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
                await writer.drain()
                self.unavailable += 1
                self._notify()
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def close(self) -> None:
        self.set_mode("closed")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


@contextmanager
def flaky_proxy(upstream: str, mode: str = "down") -> Iterator[FlakyProxy]:
    proxy = FlakyProxy(upstream)
    proxy.set_mode(mode)
    try:
        yield proxy
    finally:
        proxy.close()
