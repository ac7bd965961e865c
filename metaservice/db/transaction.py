"""The one place that opens transactions: isolation, retries on conflicts, database outages as 503."""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

import anyio
import psycopg.errors
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from metaservice import failpoints
from metaservice.errors import OutcomeUnknown, Unavailable

logger = logging.getLogger("metaservice.db")

T = TypeVar("T")
IsolationLevel = Literal["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"]

_RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
_UNAVAILABLE = (
    psycopg.errors.QueryCanceled,  # statement_timeout
    psycopg.errors.LockNotAvailable,  # lock_timeout
    psycopg.errors.AdminShutdown,
    psycopg.errors.CannotConnectNow,
    psycopg.errors.TooManyConnections,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


def is_unavailable(exc: BaseException) -> bool:
    """True when the failure means the database is away or overloaded, not that the request is wrong."""
    if isinstance(exc, PoolTimeout | OperationalError | InterfaceError):
        return True
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or isinstance(exc.orig, _UNAVAILABLE)
    return isinstance(exc, _UNAVAILABLE | ConnectionError | OSError)


DEFAULT_DEADLINE = 30.0  # seconds; sessions made by `make_sessionmaker` carry the configured one


def _deadline(session: AsyncSession) -> float:
    return float(session.info.get("deadline", DEFAULT_DEADLINE))


async def _discard_connection(session: AsyncSession) -> None:
    """Drop the session's connection without talking to the database: after a deadline, it may never answer."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(1):
        await session.invalidate()


def _rolled_back(exc: BaseException) -> bool:
    """True when PostgreSQL itself answered that the statement failed (a timeout, a lock wait cut short), so
    nothing was committed. A lost connection, or the server shutting down (SQLSTATE 57P01-57P05, which can
    arrive after a COMMIT went through), proves nothing."""
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return sqlstate is not None and not sqlstate.startswith(("08", "57P"))


def _lost(exc: BaseException, *, writing: bool) -> Unavailable | OutcomeUnknown:
    """The error for a failed database round trip. Once a write may have reached COMMIT, nobody can tell
    whether it committed, and saying 503 ("nothing happened, retry") would invite a duplicate."""
    cause = type(getattr(exc, "orig", None) or exc).__name__
    if writing and not _rolled_back(exc):
        logger.warning("database connection lost while committing; outcome unknown: %s", exc)
        return OutcomeUnknown(
            f"the database connection was lost while committing ({cause}): the change may or may not have been "
            "made. Repeating an idempotent call is safe (POST /barriers: with the same Idempotency-Key)"
        )
    logger.warning("database unavailable: %s", exc)
    return Unavailable(f"the database is unavailable: {cause}")


async def in_transaction(
    session: AsyncSession,
    work: Callable[[AsyncSession], Awaitable[T]],
    *,
    isolation: IsolationLevel = "READ COMMITTED",
    read_only: bool = False,
    attempts: int = 5,
) -> T:
    """Run `work` as one transaction that is committed before this returns, re-running it on conflicts.

    `work` must only touch the database, so that running it again is safe. A database outage or timeout
    becomes `Unavailable` (503 with Retry-After): the transaction was rolled back, so retrying is safe. A
    connection lost during COMMIT becomes `OutcomeUnknown` (504). Each attempt is bounded by the session's
    deadline, which also covers a database that stopped answering without closing the connection (a network
    partition: PostgreSQL's own timeouts cannot help when its answers are lost).
    """
    deadline = _deadline(session)
    for attempt in range(1, attempts + 1):
        committing = False
        try:
            with anyio.fail_after(deadline):
                async with session.begin():
                    await session.connection(
                        execution_options={"isolation_level": isolation, "postgresql_readonly": read_only}
                    )
                    result = await work(session)
                    if not read_only:
                        await session.flush()
                        failpoints.hit("before_commit")
                        committing = True
            if not read_only:
                failpoints.hit("after_commit")
            return result
        except TimeoutError as exc:
            await _discard_connection(session)
            if committing:
                raise _lost(exc, writing=True) from exc
            logger.warning("no answer from the database within %.1fs", deadline)
            raise Unavailable(f"the database did not answer within {deadline:g}s") from exc
        except DBAPIError as exc:
            if isinstance(exc.orig, _RETRYABLE) and attempt < attempts:
                await anyio.sleep(random.uniform(0, 0.002 * 2**attempt))  # backoff, not synchronisation
                continue
            if isinstance(exc.orig, _RETRYABLE):
                raise Unavailable("the database is contended; retry shortly") from exc
            if is_unavailable(exc):
                raise _lost(exc, writing=committing) from exc
            raise
        except (PoolTimeout, OSError) as exc:
            raise _lost(exc, writing=committing) from exc
    raise AssertionError("unreachable")


async def in_autocommit(
    session: AsyncSession, work: Callable[[AsyncConnection], Awaitable[T]], *, writes: bool = True
) -> T:
    """Run `work`, statements that each commit on their own, on a connection of the session's engine.

    For hot single-statement writes (barrier allocation): no BEGIN / COMMIT round trips, so row locks are held
    only while PostgreSQL runs the statement; and for reads that need no common snapshot. Failing to get a
    connection is `Unavailable` (nothing was sent); losing it once a write was sent is `OutcomeUnknown`, since
    it may have committed.
    """
    deadline = _deadline(session)
    engine = session.bind
    assert isinstance(engine, AsyncEngine), "sessions are bound to one engine"
    sent = False
    try:
        with anyio.fail_after(deadline):
            async with engine.connect() as connection:
                await connection.execution_options(isolation_level="AUTOCOMMIT")
                if writes:
                    failpoints.hit("before_commit")
                sent = writes
                try:
                    result = await work(connection)
                except anyio.get_cancelled_exc_class():
                    with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                        await connection.invalidate()  # mid-statement: unusable, and the database may be away
                    raise
        if writes:
            failpoints.hit("after_commit")
        return result
    except TimeoutError as exc:
        if sent:
            raise _lost(exc, writing=True) from exc
        raise Unavailable(f"the database did not answer within {deadline:g}s") from exc
    except DBAPIError as exc:
        if is_unavailable(exc):
            raise _lost(exc, writing=sent) from exc
        raise
    except (PoolTimeout, OSError) as exc:
        raise _lost(exc, writing=sent) from exc
