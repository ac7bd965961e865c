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
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice import failpoints
from metaservice.errors import Unavailable

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
    becomes `Unavailable` (503 with Retry-After): the transaction was rolled back, so retrying is safe.
    """
    for attempt in range(1, attempts + 1):
        try:
            async with session.begin():
                await session.connection(
                    execution_options={"isolation_level": isolation, "postgresql_readonly": read_only}
                )
                result = await work(session)
                if not read_only:
                    failpoints.hit("before_commit")
            if not read_only:
                failpoints.hit("after_commit")
            return result
        except DBAPIError as exc:
            if isinstance(exc.orig, _RETRYABLE) and attempt < attempts:
                await anyio.sleep(random.uniform(0, 0.002 * 2**attempt))  # backoff, not synchronisation
                continue
            if isinstance(exc.orig, _RETRYABLE):
                raise Unavailable("the database is contended; retry shortly") from exc
            if is_unavailable(exc):
                logger.warning("database unavailable: %s", exc.orig or exc)
                raise Unavailable(f"the database is unavailable: {type(exc.orig or exc).__name__}") from exc
            raise
        except (PoolTimeout, OSError) as exc:
            logger.warning("database unavailable: %s", exc)
            raise Unavailable(f"the database is unavailable: {type(exc).__name__}") from exc
    raise AssertionError("unreachable")
