"""Coalescing: concurrent requests of one kind share one statement, on one dedicated connection per process.

A timestamp oracle beats one-allocation-per-statement by batching; the same holds for every statement of the
barrier protocol. Requests that arrive while a statement of their kind is in flight wait for the next one, which
serves them all: at low load a request is sent after one turn of the event loop (which lets requests that
arrived together join), under load the batch grows with the load, and each request pays a share of one round
trip, one executor start and one commit instead of all of them (docs/design.md, "Coalesced statements").

Each kind has its own connection, never one of the request pool's, so a pool exhausted by waiting requests
cannot starve the protocol; several server processes each run their own, and row locks order them. A batch runs
under the database deadline. What a failed batch answers its requests:
- an error PostgreSQL answered for a batch of several (a constraint, a bug): each request is run again alone,
  so one request's error is never another's;
- a lost connection before the statement was sent, or an error PostgreSQL answered (a timeout): 503, nothing
  happened;
- a lost connection once a write was sent: 504 `outcome_unknown` for every request of the batch.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import anyio
import psycopg

from metaservice import failpoints
from metaservice.db import statements
from metaservice.errors import MetaServiceError, OutcomeUnknown, Unavailable

if TYPE_CHECKING:
    from metaservice.db.database import Connection, Database

logger = logging.getLogger("metaservice.coalescer")

Q = TypeVar("Q")
A = TypeVar("A")

MAX_BATCH = 256


@dataclass
class _Pending(Generic[Q, A]):
    request: Q
    future: asyncio.Future[A]
    tally: statements.Tally | None
    on_send: Callable[[], None] | None


class Coalescer(Generic[Q, A]):
    """Serves requests of one kind in batches: `run(conn, requests)` answers a batch in one statement.

    `writes`: the statement writes (crash failpoints around it; a connection lost once it was sent is an unknown
    outcome). `keys`: what a request touches; a request sharing a key with one already in the batch waits for the
    next batch (one statement cannot order two changes of one row). `after`: failpoints hit after a batch returned.
    `what` names the work in errors ("allocating", "writing").
    """

    def __init__(
        self,
        db: Database,
        run: Callable[[Connection, Sequence[Q]], Awaitable[Sequence[A]]],
        *,
        name: str,
        writes: bool,
        keys: Callable[[Q], Iterable[Hashable]] | None = None,
        after: Sequence[str] = (),
        what: str = "writing",
    ) -> None:
        self._db, self._run, self._name, self._writes, self._keys, self._what = db, run, name, writes, keys, what
        self._after = (*after, "after_commit") if writes else tuple(after)
        self._queue: list[_Pending[Q, A]] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: Connection | None = None
        self._generation = 0  # the database's connection generation when this connection was made
        self._last_used = 0.0
        self.calls = 0  # statements sent (tests and benchmarks)
        self.served = 0  # requests answered

    async def submit(self, request: Q, *, on_send: Callable[[], None] | None = None) -> A:
        """Queue `request` and wait for its answer (the caller's deadline bounds the wait). `on_send` is called
        when the statement carrying it is about to be sent: from then on its outcome may be unknown."""
        future: asyncio.Future[A] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(request, future, statements.current(), on_send))
        if self._task is None or self._task.done():
            # Its own empty context: the batches belong to no request (request ids, statement tallies).
            self._task = asyncio.create_task(self._serve(), name=self._name, context=contextvars.Context())
        self._wakeup.set()
        return await future

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for pending in self._queue:
            if not pending.future.done():
                pending.future.set_exception(Unavailable("the server is shutting down"))
        self._queue.clear()
        await self._discard()

    async def _serve(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await asyncio.sleep(0)  # requests arriving in the same turn of the loop join this batch
            batch = self._take()
            if self._queue:
                self._wakeup.set()
            if batch:
                await self._send(batch)

    def _take(self) -> list[_Pending[Q, A]]:
        """The next batch, in arrival order: callers whose deadline passed are dropped, requests that share a key
        with an earlier one of the batch stay queued (first) for the next."""
        batch: list[_Pending[Q, A]] = []
        held: list[_Pending[Q, A]] = []
        taken: set[Hashable] = set()
        for i, pending in enumerate(self._queue):
            if len(batch) == MAX_BATCH:
                held += self._queue[i:]
                break
            if pending.future.done():
                continue
            if self._keys is not None:
                keys = set(self._keys(pending.request))
                if keys & taken:
                    held.append(pending)
                    continue
                taken |= keys
            batch.append(pending)
        self._queue = held
        return batch

    async def _send(self, batch: list[_Pending[Q, A]]) -> None:
        sent = False
        try:
            with anyio.fail_after(self._deadline()), self._db.retirable():
                conn = await self._connection()
                if self._writes:
                    failpoints.hit("before_commit")
                for pending in batch:
                    if pending.on_send is not None:
                        pending.on_send()
                sent = True
                answers = list(await self._run(conn, [p.request for p in batch]))
            if len(answers) != len(batch):
                raise RuntimeError(f"{self._name}: {len(answers)} answers to {len(batch)} requests")
            for name in self._after:
                failpoints.hit(name)
        except BaseException as exc:  # every caller of the batch must hear about it, then the task goes on
            if isinstance(exc, asyncio.CancelledError):
                self._fail(batch, Unavailable("the server is shutting down"))
                await self._discard()
                raise
            if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):  # a standby now: nothing happened
                await self._discard()
                self._db.retire(f"{self._name} reached a read-only server")
                logger.warning("%s: the database refused the statement as read-only: %s", self._name, exc)
                self._fail(batch, Unavailable("the database is read-only (a standby, during a failover): retry"))
                return
            if _answered_error(exc):  # PostgreSQL refused the statement and rolled it back; the connection is fine
                if len(batch) > 1:
                    for pending in batch:  # one request's error is never another's
                        await self._send([pending])
                    return
            else:
                await self._discard()
                if isinstance(exc, TimeoutError):  # PostgreSQL would have answered by now: the host is gone
                    self._db.retire(f"{self._name} got no answer within {self._deadline():g}s", interrupt=True)
            self._fail(batch, _error_for(exc, sent=sent, writes=self._writes, what=self._what))
            return
        self._last_used = time.monotonic()
        self.calls += 1
        for pending, answer in zip(batch, answers, strict=True):
            self.served += 1
            if pending.tally is not None:
                pending.tally.statements += 1 / len(batch)  # one statement served the whole batch
            if not pending.future.done():
                pending.future.set_result(answer)

    @staticmethod
    def _fail(batch: Sequence[_Pending[Q, A]], error: BaseException) -> None:
        for pending in batch:
            if not pending.future.done():
                pending.future.set_exception(error)

    def _deadline(self) -> float:
        """How long a batch may take: a connection attempt and one statement (PostgreSQL ends it at its statement
        timeout), then the connection is given up for lost (a host that vanished without closing it). Never more
        than the transaction deadline of the requests it serves."""
        settings = self._db.settings
        if settings.statement_timeout_ms == 0:  # no statement timeout: only the transaction deadline bounds it
            return self._db.deadline
        return min(self._db.deadline, settings.connect_timeout + settings.statement_timeout_ms / 1000 + 1.0)

    async def _connection(self) -> Connection:
        """The dedicated connection: (re)connected when needed, pinged after sitting idle, replaced when the
        database retired every connection (one of them met a standby)."""
        if self._conn is not None and self._generation != self._db.generation:
            await self._discard()
        if self._conn is not None and not self._conn.closed:
            if time.monotonic() - self._last_used < self._db.settings.idle_check_seconds:
                return self._conn
            try:
                await self._conn.execute("")
                return self._conn
            except psycopg.Error:
                await self._discard()
        self._generation = self._db.generation
        self._conn = await self._db.connect()
        return self._conn

    async def _discard(self) -> None:
        if self._conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await self._conn.close()
            self._conn = None


def _answered_error(exc: BaseException) -> bool:
    """PostgreSQL refused the statement (a constraint, a bug) and rolled it back; not an outage or a timeout."""
    return isinstance(exc, psycopg.Error) and not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


def _error_for(exc: BaseException, *, sent: bool, writes: bool, what: str) -> BaseException:
    """The error every request of a failed batch gets: outcome unknown once a write may have committed; an error
    that is not an outage (a bug) is passed on as it is, to become a logged 500."""
    if isinstance(exc, MetaServiceError):
        return exc
    if _answered_error(exc):
        logger.error("a coalesced statement failed: %r", exc)
        return RuntimeError(f"a coalesced statement failed: {exc!r}")
    sqlstate = getattr(exc, "sqlstate", None)
    answered = sqlstate is not None and not sqlstate.startswith(("08", "57P"))
    if writes and sent and not answered:
        logger.warning("connection lost while %s; outcome unknown: %r", what, exc)
        return OutcomeUnknown(
            f"the database connection was lost while {what} ({type(exc).__name__}): the change may or may not "
            "have been made. Repeating an idempotent call is safe (POST /barriers: with the same Idempotency-Key)"
        )
    if isinstance(exc, TimeoutError):
        return Unavailable("the database did not answer in time")
    logger.warning("a coalesced statement failed: %r", exc)
    return Unavailable(f"the database is unavailable: {type(exc).__name__}")
