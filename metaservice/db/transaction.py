"""The one place units of work meet the database: transactions, autocommit steps, deadlines and outage errors.

Two shapes, both on pooled autocommit connections (`db/database.py`):
- `in_transaction`: BEGIN (with the isolation level) … COMMIT, re-run on serialization failures and deadlocks.
  For multi-statement work that must see one snapshot or commit together (registration, rollback, reads of
  several statements).
- `in_autocommit`: statements that each commit on their own. For the barrier protocol (`next`, `commit`,
  `abort`: one read, a decision in Python, one compare-and-set write) and single-statement reads. The work marks
  its write with `unit.writing()` (its own connection) or `unit.mark_sent` (a coalesced statement carried it,
  db/coalescer.py), so that a connection lost or a deadline passed after that is reported as an unknown outcome.
  With `connected=False` the unit takes a pooled connection only when the work asks for one.

What a failure means to the caller:
- 503 `unavailable` (`Unavailable`): nothing happened, retry. A pool timeout, a database that refuses or drops
  the connection before a write was sent, or an error PostgreSQL itself reported (statement or lock timeout,
  serialization failure past the retries: the statement was rolled back; a write refused by a server that is now
  a standby, SQLSTATE 25006, after which every connection is replaced).
- 504 `outcome_unknown` (`OutcomeUnknown`): the connection was lost while a write may have been committing.
- 429 `overloaded` (`Overloaded`): too many requests already wait for a connection; shed at once.
Every unit of work runs under a deadline (`Database.deadline`): PostgreSQL's own timeouts cannot end a request
whose answers are lost on the network. Past it the connection is closed without a round trip (psycopg abandons
an interrupted query and the pool discards the connection).
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Literal, TypeVar

import anyio
import psycopg
import psycopg.errors
from psycopg_pool import PoolTimeout, TooManyRequests

from metaservice import failpoints
from metaservice.db import statements
from metaservice.db.database import Connection, Database
from metaservice.errors import OutcomeUnknown, Overloaded, Unavailable

logger = logging.getLogger("metaservice.db")

T = TypeVar("T")
IsolationLevel = Literal["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"]

_RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
_UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, ConnectionError, OSError)
# SQLSTATE 25006: the server refused a write because it is (now) a standby. PostgreSQL answered, so nothing
# happened; the connection was retired (Database.connection) and the request is answered 503.
_READ_ONLY = psycopg.errors.ReadOnlySqlTransaction


def _read_only(exc: BaseException) -> Unavailable:
    logger.warning("the database refused a write as read-only (a standby): %s", exc)
    return Unavailable("the database is read-only (a standby, during a failover): nothing was changed; retry")


def _answered(exc: BaseException) -> bool:
    """True when PostgreSQL itself answered that the statement failed (a timeout, a lock wait cut short), so
    nothing was committed. A lost connection, or the server shutting down (SQLSTATE 57P01-57P05, which can
    arrive after a COMMIT went through), proves nothing."""
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate is not None and not sqlstate.startswith(("08", "57P"))


def _lost(exc: BaseException, *, writing: bool) -> Unavailable | OutcomeUnknown:
    """The error for a failed database round trip. Once a write may have reached COMMIT, nobody can tell
    whether it committed, and saying 503 ("nothing happened, retry") would invite a duplicate."""
    cause = type(exc).__name__
    if writing and not _answered(exc):
        logger.warning("database connection lost while committing; outcome unknown: %s", exc)
        return OutcomeUnknown(
            f"the database connection was lost while committing ({cause}): the change may or may not have been "
            "made. Repeating an idempotent call is safe (POST /barriers: with the same Idempotency-Key)"
        )
    logger.warning("database unavailable: %s", exc)
    return Unavailable(f"the database is unavailable: {cause}")


def _overloaded(db: Database) -> Overloaded:
    return Overloaded(
        f"too many requests are waiting for a database connection (more than {db.settings.pool_max_waiting}); "
        "retry shortly",
        retry_after=db.settings.retry_after_seconds,
    )


class Unit:
    """One unit of work's connection, and whether a write was sent for it (503 or 504 when it is lost).

    The connection is taken from the pool when first asked for and given back when the unit ends: steps whose
    statements go through the process's coalesced connections (db/coalescer.py) need none most of the time.
    """

    def __init__(self, db: Database, stack: AsyncExitStack) -> None:
        self._db, self._stack = db, stack
        self._conn: Connection | None = None
        self.sent_write = False

    @property
    def conn(self) -> Connection:
        """The unit's connection (units run with `connected=True` hold one from the start)."""
        if self._conn is None:
            raise RuntimeError("the unit holds no connection: await unit.connection()")
        return self._conn

    @property
    def holds_connection(self) -> bool:
        return self._conn is not None

    async def connection(self) -> Connection:
        """The unit's connection, taken from the pool on first use."""
        if self._conn is None:
            self._conn = await self._stack.enter_async_context(self._db.connection())
        return self._conn

    def mark_sent(self) -> None:
        """A write for this unit was sent (by a coalesced statement): from now on its outcome may be unknown."""
        self.sent_write = True

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[Connection]:
        """Mark the statements run inside as the unit's write (each commits on its own in autocommit)."""
        conn = await self.connection()
        failpoints.hit("before_commit")
        self.sent_write = True
        yield conn
        failpoints.hit("after_commit")


async def in_autocommit(db: Database, work: Callable[[Unit], Awaitable[T]], *, connected: bool = True) -> T:
    """Run `work` on one pooled autocommit connection under the deadline (see the module docstring). Without
    `connected` the connection is taken only when the work asks for one (`Unit.connection`)."""
    unit: Unit | None = None
    try:
        with anyio.fail_after(db.deadline):
            async with AsyncExitStack() as stack:
                unit = Unit(db, stack)
                with db.retirable():
                    if connected:
                        await unit.connection()
                    return await work(unit)
    except TooManyRequests as exc:
        raise _overloaded(db) from exc
    except TimeoutError as exc:
        if unit is not None and unit.holds_connection:  # PostgreSQL's own timeouts did not end it: host gone?
            db.retire(f"a request's connection got no answer within {db.deadline:g}s", interrupt=True)
        if unit is not None and unit.sent_write:
            raise _lost(exc, writing=True) from exc
        logger.warning("no answer from the database within %.1fs", db.deadline)
        raise Unavailable(f"the database did not answer within {db.deadline:g}s") from exc
    except PoolTimeout as exc:
        raise _lost(exc, writing=False) from exc
    except _RETRYABLE as exc:
        raise Unavailable("the database is contended; retry shortly") from exc
    except _READ_ONLY as exc:
        raise _read_only(exc) from exc
    except _UNAVAILABLE as exc:
        raise _lost(exc, writing=unit is not None and unit.sent_write) from exc


async def in_transaction(
    db: Database,
    work: Callable[[Connection], Awaitable[T]],
    *,
    isolation: IsolationLevel = "READ COMMITTED",
    read_only: bool = False,
    attempts: int = 5,
) -> T:
    """Run `work` as one transaction that is committed before this returns, re-running it on conflicts.

    `work` must only touch the database, so that running it again is safe.
    """
    begin = f"BEGIN ISOLATION LEVEL {isolation}{', READ ONLY' if read_only else ''}"
    for attempt in range(1, attempts + 1):
        committing = False
        try:
            with anyio.fail_after(db.deadline), db.retirable():
                async with db.connection() as conn:
                    statements.count()
                    await conn.execute(begin)
                    try:
                        result = await work(conn)
                    except BaseException:
                        if conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.ACTIVE:
                            with anyio.CancelScope(shield=True):
                                await _rollback_quietly(conn)
                        raise
                    if not read_only:
                        failpoints.hit("before_commit")
                    committing = not read_only
                    statements.count()
                    await conn.execute("COMMIT")
            if not read_only:
                failpoints.hit("after_commit")
            return result
        except TooManyRequests as exc:
            raise _overloaded(db) from exc
        except TimeoutError as exc:
            db.retire(f"a transaction got no answer within {db.deadline:g}s", interrupt=True)
            if committing:
                raise _lost(exc, writing=True) from exc
            logger.warning("no answer from the database within %.1fs", db.deadline)
            raise Unavailable(f"the database did not answer within {db.deadline:g}s") from exc
        except PoolTimeout as exc:
            raise _lost(exc, writing=False) from exc
        except _RETRYABLE as exc:
            if attempt < attempts:
                await anyio.sleep(random.uniform(0, 0.002 * 2**attempt))  # backoff, not synchronisation
                continue
            raise Unavailable("the database is contended; retry shortly") from exc
        except _READ_ONLY as exc:
            raise _read_only(exc) from exc
        except _UNAVAILABLE as exc:
            raise _lost(exc, writing=committing) from exc
    raise AssertionError("unreachable")


async def _rollback_quietly(conn: Connection) -> None:
    """End a failed transaction; a connection that cannot even roll back is discarded by the pool."""
    try:
        with anyio.move_on_after(1):
            statements.count()
            await conn.execute("ROLLBACK")
    except psycopg.Error:
        await conn.close()
