"""Wake-ups for freshness-bounded reads: one LISTEN connection per server process, shared by every waiter.

Writes that can make a newer consistent version exist (a barrier issued or sealed, a root snapshot reported, a
commit or abort that changes snapshot ranges) lead to `NOTIFY metaservice_versions`, delivered to every listening
server process on the database. The protocol's hot path (`next`, `commit`, `abort`, barrier allocation) does not
notify inside its own statement: a notifying transaction takes PostgreSQL's database-wide notify lock at commit,
which serialised the protocol's commits (bench: cycle 426 → 340 req/s, open-loop p99 13 → 59 ms). Its writes call
`ChangeNotifier.changed()` once committed, and the notifier sends the NOTIFY from its own connection, off the
request path, coalescing the changes of up to 50 ms into one. Writes inside a larger transaction
(registration, rollback) still notify in their statement, delivered on commit. Here one dedicated
connection (never one of the request pool's: a pool exhausted by waiting requests could otherwise starve it)
listens and turns each notification into a new *generation*: waiters block on an asyncio event, not on the
database, and re-check once woken. Re-checks of the same question asked at the same generation share one query,
and at most `max_rechecks` run at once, so two hundred waiters cost a handful of pooled connections per wake-up.

A lost listening connection is reconnected with backoff; notifications sent meanwhile are lost, so the
reconnection itself counts as a change (every waiter re-checks). A connection that heard nothing for a third of
`dead_connection_seconds` is pinged (bounded by the same time): a host that vanished without closing it is noticed
in seconds, not when TCP gives up. Closing wakes every waiter with `closed` set.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from metaservice.errors import Unavailable

if TYPE_CHECKING:
    from metaservice.db.database import Connection, Database

# Freshness-bounded reads wait for a notification on this channel. Writers that can make a newer consistent version
# exist call NOTIFY_CALL inside their writing statement (repositories/protocol.py): PostgreSQL delivers it on commit,
# to every listening server process, and folds duplicates of one transaction into one.
CHANNEL = "metaservice_versions"
LISTEN = f"LISTEN {CHANNEL}"
NOTIFY_CALL = f"pg_notify('{CHANNEL}', '')"

logger = logging.getLogger("metaservice.listener")

T = TypeVar("T")
_BACKOFF_CAP = 5.0


NOTIFY_EVERY = 0.05  # seconds: the changes committed meanwhile share one notification (bench: 5 ms cost the
# cycle 15% and tripled its open-loop p99; 50 ms cost nothing measurable and delays a waiter's answer by at most that)


class ChangeNotifier:
    """Sends `NOTIFY metaservice_versions` after hot-path writes committed: off the request path, on a dedicated
    connection, at most one notification per `NOTIFY_EVERY` per process. A send that fails is repeated until one
    goes through; only a crash of the process loses one (a waiter then re-checks at its deadline)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._conn: Connection | None = None
        self._generation = 0
        self.sent = 0  # notifications sent (tests, debugging)
        self.failed = 0  # sends that failed and were repeated

    def changed(self) -> None:
        """A committed write may have made a newer consistent version exist."""
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._send(), name="metaservice-notifier", context=contextvars.Context())

    async def _send(self) -> None:
        """Send until no change is left unannounced. The pending flag is cleared only by a send that went
        through: after a failure (a failover killed the connection) it is sent again, with backoff, on a new
        connection, so the first change after an outage still wakes the waiters at once."""
        backoff = 0.1
        settings = self._db.settings
        deadline = settings.connect_timeout + settings.dead_connection_seconds
        while self._dirty:
            self._dirty = False
            try:
                # retirable: a send waiting on a host the database gave up (the listener's check found it gone) is
                # interrupted then, not left to its deadline, and goes out again at once on a new connection
                with anyio.fail_after(deadline), self._db.retirable():
                    if self._conn is not None and self._generation != self._db.generation:
                        await self._discard()  # the database retired every connection made before
                    if self._conn is None or self._conn.closed:
                        self._generation = self._db.generation
                        self._conn = await self._db.connect()
                    await self._conn.execute(f"SELECT {NOTIFY_CALL}")
                self.sent += 1
                backoff = 0.1
            except Exception as exc:  # an outage (psycopg.Error, a timeout): the change is still unannounced
                self._dirty = True
                self.failed += 1
                logger.warning("notifying %s failed (%s); sending again in %.1fs", CHANNEL, exc, backoff)
                await self._discard()
                await asyncio.sleep(backoff)  # backoff before retrying, not synchronisation
                backoff = min(backoff * 2, _BACKOFF_CAP)
                continue
            await asyncio.sleep(NOTIFY_EVERY)  # coalescing: changes committed meanwhile share the next one

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._discard()

    async def _discard(self) -> None:
        if self._conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await self._conn.close()
            self._conn = None


class ChangeListener:
    """Generations of `NOTIFY metaservice_versions`, and the waiters blocked on the next one (this process)."""

    def __init__(self, db: Database, *, max_rechecks: int) -> None:
        self._db = db
        self.generation = 0
        self.closed = False
        self.waiting = 0  # requests blocked until the next change (the gauge metaservice_version_waiters)
        self.notifications = 0  # received since start (tests, debugging)
        self.outage_rechecks = 0  # checks of waiting reads that met an outage and waited on (a metric)
        self._max_rechecks = max(1, max_rechecks)
        self._rechecks: asyncio.Semaphore | None = None
        self._changed: asyncio.Event | None = None
        self._listening: asyncio.Event | None = None
        self._retry_now: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._conn: Connection | None = None
        self._shared: dict[Hashable, tuple[int, asyncio.Future[Any]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def ready(self) -> int:
        """Start listening (once per process) and return the current generation; a change after this call wakes
        `wait` even if it came before `wait` was entered. 503 when the database cannot be reached in time."""
        if self.closed:
            raise Unavailable("the server is shutting down")
        if self._task is None or self._task.done():  # the first wait of this process, or the task died
            if self._changed is None:
                self._changed = asyncio.Event()
                self._listening = asyncio.Event()
                self._retry_now = asyncio.Event()
                self._rechecks = asyncio.Semaphore(self._max_rechecks)
            # a context of its own: the process's listener must not log under the first waiter's request id
            self._task = asyncio.create_task(self._listen(), name="metaservice-listener", context=contextvars.Context())
        assert self._listening is not None
        if not self._listening.is_set():
            if self._retry_now is not None:
                self._retry_now.set()  # a waiter needs the listener: try now, not after a backoff grown in an outage
            with anyio.move_on_after(self._db.settings.connect_timeout + 1):
                await self._listening.wait()
            if not self._listening.is_set():
                raise Unavailable("cannot listen for changes: the database is unavailable")
        return self.generation

    async def wait(self, generation: int, *, timeout: float) -> int:
        """Block until a change after `generation` (at once if one came already) or `timeout`; the generation
        now. Holds no database connection."""
        if self.generation == generation and not self.closed and timeout > 0:
            assert self._changed is not None
            changed = self._changed
            self.waiting += 1
            try:
                with anyio.move_on_after(timeout):
                    await changed.wait()
            finally:
                self.waiting -= 1
        if self.closed:
            raise Unavailable("the server is shutting down; ask again")
        return self.generation

    async def shared(self, key: Hashable, generation: int, check: Callable[[], Awaitable[T]]) -> T:
        """`check()`, or the result of a run for the same `key` started at `generation` or later (it saw every
        change this caller was woken for). Runs are bounded to `max_rechecks` at once."""
        entry = self._shared.get(key)
        if entry is None or entry[0] < generation or (entry[1].done() and entry[1].exception() is not None):
            future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
            entry = (self.generation, future)
            self._shared[key] = entry
            task = asyncio.create_task(self._run_shared(key, entry, check), name="metaservice-recheck")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        result: T = await asyncio.shield(entry[1])
        return result

    async def _run_shared(
        self, key: Hashable, entry: tuple[int, asyncio.Future[Any]], check: Callable[[], Any]
    ) -> None:
        future = entry[1]
        try:
            assert self._rechecks is not None
            async with self._rechecks:
                future.set_result(await check())
        except BaseException as exc:  # every caller sharing the run hears of it
            if not future.done():
                future.set_exception(exc if isinstance(exc, Exception) else Unavailable("the check was cancelled"))
            if not isinstance(exc, Exception):
                raise
        finally:
            if self._shared.get(key) is entry:
                del self._shared[key]
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: callers that gave up waiting must not leave it unobserved

    def drain(self) -> None:
        """Wake every waiter to answer 503 now (the server is stopping); no new wait starts."""
        self.closed = True
        self._bump()

    @contextmanager
    def draining_on_signals(self) -> Iterator[None]:
        """Drain as soon as SIGTERM/SIGINT arrives, then let the previous handler (uvicorn's) go on.

        uvicorn's graceful shutdown waits for running requests before the lifespan ends: without this, a read
        waiting for a fresh version would hold the shutdown until its deadline or be cut off without an answer.
        Only in the main thread (signal handlers cannot be set elsewhere); restored when the block ends."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        installed: dict[int, tuple[Any, Any]] = {}

        def handler(signum: int, frame: FrameType | None) -> None:
            loop.call_soon_threadsafe(self.drain)
            previous = installed[signum][0]
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL and signum == signal.SIGINT:
                raise KeyboardInterrupt

        for sig in (signal.SIGTERM, signal.SIGINT):
            installed[sig] = (signal.getsignal(sig), handler)
            signal.signal(sig, handler)
        try:
            yield
        finally:
            for number, (previous, ours) in installed.items():
                if signal.getsignal(number) is ours:
                    signal.signal(number, previous)

    async def close(self) -> None:
        """Wake every waiter (they answer 503) and stop listening."""
        self.drain()
        if self._task is not None:
            self._task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._discard()

    def _bump(self) -> None:
        self.generation += 1
        if self._changed is not None:
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def _listen(self) -> None:
        assert self._listening is not None
        backoff = 0.1
        settings = self._db.settings
        check_every = settings.dead_connection_seconds / 3
        while not self.closed:
            try:
                with anyio.fail_after(settings.connect_timeout + check_every):
                    generation = self._db.generation
                    self._conn = await self._db.connect()
                    await self._conn.execute(LISTEN)
                self._bump()  # notifications sent while not listening are lost: everyone looks again
                self._listening.set()
                backoff = 0.1
                while not self.closed:
                    heard = False
                    async for _ in self._conn.notifies(timeout=check_every):
                        heard = True
                        self.notifications += 1
                        self._bump()
                    if self._db.generation != generation:
                        raise ConnectionError("every database connection was retired (a standby was met)")
                    if not heard:
                        # Quiet for a while: make sure the server is still there. A host that vanished without
                        # closing the connection would otherwise leave this listener deaf until TCP gives up.
                        try:
                            with anyio.fail_after(check_every):
                                await self._conn.execute("SELECT 1")
                        except TimeoutError:  # the others were made to the same host: replace them too
                            self._db.retire(
                                f"the change listener's check got no answer within {check_every:g}s", interrupt=True
                            )
                            raise
            except Exception as exc:  # an outage (psycopg.Error, OSError, a timeout) or a bug: keep listening
                logger.warning("listening on %s failed (%s); reconnecting in %.1fs", CHANNEL, exc, backoff)
            self._listening.clear()
            await self._discard()
            assert self._retry_now is not None
            self._retry_now.clear()
            with anyio.move_on_after(backoff):  # backoff before reconnecting, cut short when a waiter arrives
                await self._retry_now.wait()
            backoff = min(backoff * 2, _BACKOFF_CAP)

    async def _discard(self) -> None:
        if self._conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await self._conn.close()
            self._conn = None
