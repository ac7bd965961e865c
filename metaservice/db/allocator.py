"""Coalesced barrier allocation: concurrent requests share one call of `metaservice_issue_barriers`.

Every barrier is allocated under the `barrier_clock` row lock, so PostgreSQL alone serves at most one allocation
statement at a time (pgbench at 32 clients: ~1,500-2,800 calls/s). A timestamp oracle beats that by batching:
requests that arrive while a call is in flight wait for the next call, which serves them all (one clock lock, one
clock update; every request's root snapshots recorded first, then one barrier for each request that still needs
its own: a batch of seals shares one). At low load a request is sent at once
(after one turn of the event loop, which lets requests that arrived together join); under load the batch grows
with the load and the statement count per request falls below one.

One dedicated connection per server process (never one of the request pool's, so a pool exhausted by waiting
requests cannot starve the allocator). Several server processes each run their own allocator; the clock row lock
orders them. The call runs under the database deadline; a connection lost while a call was in flight answers
every request of the batch with `OutcomeUnknown` (it may have committed), and the next batch reconnects.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import anyio
import psycopg
from psycopg.types.json import Jsonb

from metaservice import failpoints
from metaservice.db import statements
from metaservice.errors import MetaServiceError, OutcomeUnknown, Unavailable

if TYPE_CHECKING:
    from metaservice.db.database import Connection, Database

logger = logging.getLogger("metaservice.allocator")

MAX_BATCH = 256
# An allocation that issued a barrier (sealing root snapshots into new ranges) may make a newer consistent version
# exist: once the call returned (autocommit: committed), freshness-bounded reads are told through the notifier,
# off this connection (a NOTIFY in the call would take PostgreSQL's database-wide notify lock at every commit).
_CALL = "SELECT metaservice_issue_barriers(%s)"


@dataclass(frozen=True)
class AllocationRequest:
    """One caller's request (see the migration 2026-11-24-0900 for the function's contract).

    `barrier`: issue a barrier (POST /barriers; `key` makes it idempotent). `seal`: issue one only when a table
    of `when_unsealed` has an unsealed snapshot, or `unless_after` is set and no barrier followed it (`next`).
    `report`: record root snapshots only. `roots` (table name → snapshot) are reported first in every kind.
    A `seal` naming its `job` is a job's `next` reporting the roots it reads: the function checks them against the
    job's current sources and seals when any root the job reads is unsealed (migration 2026-11-24-2100).
    """

    kind: Literal["barrier", "seal", "report"]
    by: str | None = None
    key: str | None = None
    roots: Mapping[str, int] = field(default_factory=dict)
    when_unsealed: Sequence[int] = ()
    unless_after: int | None = None
    min_interval: float = 0.0
    job: str | None = None

    def wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "by": self.by,
            "key": self.key,
            "roots": dict(self.roots),
            "when_unsealed": list(self.when_unsealed),
            "unless_after": self.unless_after,
            "min_interval": self.min_interval,
            "job": self.job,
        }


@dataclass(frozen=True)
class Allocation:
    """What the call did for one request."""

    barrier: int | None
    issued_at: datetime | None
    replayed: bool
    sealed: dict[str, int]
    wait_seconds: float | None
    latest: dict[str, int]
    error: dict[str, Any] | None

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Allocation:
        issued = data.get("issued_at")
        return cls(
            barrier=None if data.get("barrier") is None else int(data["barrier"]),
            issued_at=datetime.fromisoformat(issued) if isinstance(issued, str) else None,
            replayed=bool(data.get("replayed")),
            sealed={str(k): int(v) for k, v in (data.get("sealed") or {}).items()},
            wait_seconds=None if data.get("wait_seconds") is None else float(data["wait_seconds"]),
            latest={str(k): int(v) for k, v in (data.get("latest") or {}).items()},
            error=data.get("error"),
        )


_Pending = tuple[AllocationRequest, "asyncio.Future[Allocation]", "statements.Tally | None"]


class Allocator:
    """Queues allocation requests and serves them in batches on one dedicated connection."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._queue: list[_Pending] = []
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._conn: Connection | None = None
        self._last_used = 0.0
        self.calls = 0  # batches sent (for tests and benchmarks)
        self.served = 0  # requests answered

    async def allocate(self, request: AllocationRequest) -> Allocation:
        """Queue `request` and wait for its answer (the caller's deadline bounds the wait)."""
        future: asyncio.Future[Allocation] = asyncio.get_running_loop().create_future()
        self._queue.append((request, future, statements.current()))
        if self._task is None or self._task.done():
            self._wakeup = asyncio.Event()
            self._task = asyncio.create_task(self._serve(), name="metaservice-allocator")
        assert self._wakeup is not None
        self._wakeup.set()
        return await future

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for _, future, _ in self._queue:
            if not future.done():
                future.set_exception(Unavailable("the server is shutting down"))
        self._queue.clear()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _serve(self) -> None:
        assert self._wakeup is not None
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await asyncio.sleep(0)  # requests arriving in the same turn of the loop join this batch
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            if self._queue:
                self._wakeup.set()
            batch = [pending for pending in batch if not pending[1].done()]  # callers whose deadline passed
            if batch:
                await self._send(batch)

    async def _send(self, batch: list[_Pending]) -> None:
        sent = False
        try:
            with anyio.fail_after(self._db.deadline):
                conn = await self._connection()
                failpoints.hit("before_commit")
                sent = True
                cursor = await conn.execute(_CALL, [Jsonb([r.wire() for r, _, _ in batch])], prepare=True)
                row = await cursor.fetchone()
            failpoints.hit("barrier_allocated")
            failpoints.hit("after_commit")
        except BaseException as exc:  # every caller of the batch must hear about it, then the task goes on
            await self._discard()
            error = _error_for(exc, sent=sent)
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(error)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self._last_used = time.monotonic()
        self.calls += 1
        answers = row[0] if row is not None else []
        if any(answer.get("barrier") is not None for answer in answers):
            self._db.notifier.changed()
        for (_, future, tally), answer in zip(batch, answers, strict=True):
            self.served += 1
            if tally is not None:
                tally.statements += 1 / len(batch)  # one statement served the whole batch
            if not future.done():
                future.set_result(Allocation.from_wire(answer))

    async def _connection(self) -> Connection:
        """The dedicated connection: (re)connected when needed, pinged after sitting idle."""
        if self._conn is not None and not self._conn.closed:
            if time.monotonic() - self._last_used < self._db.settings.idle_check_seconds:
                return self._conn
            try:
                await self._conn.execute("")
                return self._conn
            except psycopg.Error:
                await self._discard()
        self._conn = await self._db.connect()
        return self._conn

    async def _discard(self) -> None:
        if self._conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await self._conn.close()
            self._conn = None


def _error_for(exc: BaseException, *, sent: bool) -> BaseException:
    """The error every request of a failed batch gets: outcome unknown once the call may have committed; an
    error that is not an outage (a bug) is passed on as it is, to become a logged 500."""
    if isinstance(exc, MetaServiceError):
        return exc
    if isinstance(exc, psycopg.Error) and not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        logger.error("barrier allocation failed: %r", exc)
        return RuntimeError(f"barrier allocation failed: {exc!r}")
    sqlstate = getattr(exc, "sqlstate", None)
    answered = sqlstate is not None and not sqlstate.startswith(("08", "57P"))
    if sent and not answered:
        logger.warning("connection lost during a barrier allocation; outcome unknown: %r", exc)
        return OutcomeUnknown(
            f"the database connection was lost while allocating ({type(exc).__name__}): a barrier may or may not "
            "have been issued. Repeating the call with the same Idempotency-Key is safe"
        )
    if isinstance(exc, TimeoutError | asyncio.CancelledError):
        return Unavailable("the database did not answer the allocation in time")
    logger.warning("barrier allocation failed: %r", exc)
    return Unavailable(f"the database is unavailable: {type(exc).__name__}")
