"""The request path's one way to PostgreSQL: psycopg's own async pool (the protocol's machinery over it: runtime.py).

Measured on this machine, a `SELECT 1` route through `psycopg_pool.AsyncConnectionPool` reaches ~0.4x a no-op
route, through an SQLAlchemy `AsyncSession` with pre-ping ~0.12x: the session layer was the floor. SQLAlchemy
keeps the schema (models for Alembic); every statement a request runs goes through the pool.

Connections are autocommit: a single statement is its own transaction (no BEGIN/COMMIT round trips); units of
work that need several statements to agree open an explicit transaction (`db/transaction.py`). Timeouts are set
once per connection. A connection is checked with an empty query only after it sat idle for a while (a server
restart meanwhile would otherwise fail the first statement of the next request); busy connections are never
pinged. The wait queue is bounded: past `pool_max_waiting` waiting requests the pool refuses at once and the
request is answered 429 with Retry-After, instead of a 503 after the pool timeout.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout, TooManyRequests

from metaservice.settings import Settings

Connection = psycopg.AsyncConnection[Any]


class Database:
    """A pool of autocommit connections with the server's timeouts and the transaction deadline; nothing else.

    Built and opened in the app's lifespan (or by the CLI); closed on shutdown.
    """

    def __init__(self, settings: Settings, *, application_name: str = "metaservice") -> None:
        self.settings = settings
        self.deadline = settings.transaction_deadline()
        self.conninfo = settings.libpq_url()
        self.connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "application_name": application_name,
            "connect_timeout": max(1, int(settings.connect_timeout)),
            # Generic plans: the hot statements are prepared once per connection and called with parameters
            # whose shapes vary (a gather with and without input windows, writes of 1-3 rows). Left to choose,
            # PostgreSQL re-planned a sixth of the gathers (~1.5 ms each) and a quarter of the writes under
            # the cycle's load; forced, it plans each statement once per connection (docs/design.md).
            "options": f"-c statement_timeout={settings.statement_timeout_ms} "
            f"-c lock_timeout={settings.lock_timeout_ms} -c plan_cache_mode=force_generic_plan",
        }
        self._returned_at: weakref.WeakKeyDictionary[Connection, float] = weakref.WeakKeyDictionary()
        self.pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            self.conninfo,
            kwargs=self.connect_kwargs,
            min_size=min(settings.pool_min_size, settings.pool_size),
            max_size=settings.pool_size,
            open=False,
            check=self._check_if_idle,
            reset=self._mark_returned,
            name=application_name,
            timeout=settings.pool_timeout,
            max_idle=settings.pool_max_idle_seconds,
            # A failed reconnection is retried with backoff (1 s, 2 s, …) until this; then the pool gives the slot
            # up and the next request that waits opens one at once: after an outage the first request after the
            # database is back reconnects, instead of waiting for a backoff that grew during the outage.
            reconnect_timeout=2.0,
        )
        self._waiting = 0  # requests of this process waiting for a connection right now
        self._away = False  # a wait for a connection timed out while connection attempts failed: unreachable
        self._errors_at_success = 0  # the pool's failed connection attempts when a connection was last obtained

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A pooled connection, or `TooManyRequests` at once when more than `pool_max_waiting` requests already
        wait for one. (The pool's own `max_waiting` also counts waiters that gave up, so during an outage it
        would shed with 429 what is really a 503.)"""
        limit = self.settings.pool_max_waiting
        if limit and self._waiting >= limit:
            raise TooManyRequests(f"{self._waiting} requests are already waiting for a database connection")
        # Once a wait ended while connection attempts fail, the database is away: later requests wait only
        # `outage_wait_seconds` (enough for one connection attempt to a database that is back) instead of the
        # whole pool timeout, so an outage is answered 503 promptly; the first connection obtained ends it.
        timeout = min(self.settings.pool_timeout, self.settings.outage_wait_seconds) if self._away else None
        self._waiting += 1
        try:
            conn = await self.pool.getconn(timeout=timeout)
        except PoolTimeout:
            # away when connection attempts failed since a connection was last obtained (not a busy pool)
            self._away = self._connect_errors() > self._errors_at_success
            raise
        finally:
            self._waiting -= 1
        self._away, self._errors_at_success = False, self._connect_errors()
        try:
            yield conn
        finally:
            with anyio.CancelScope(shield=True):  # a connection given back half-way would be lost to the pool
                await self.pool.putconn(conn)

    async def open(self) -> None:
        """Open the pool (waiting for its first connections, so a wrong URL fails at start-up)."""
        await self.pool.open(wait=True, timeout=self.settings.connect_timeout + self.settings.pool_timeout)

    async def close(self) -> None:
        """Close the pool (close the `Runtime` built over it first: its waiters answer before the pool goes)."""
        await self.pool.close(timeout=5)

    async def connect(self) -> Connection:
        """A dedicated connection outside the pool (a coalescer's, the listener's), with the same options."""
        return await psycopg.AsyncConnection.connect(self.conninfo, **self.connect_kwargs)

    async def _mark_returned(self, conn: Connection) -> None:
        self._returned_at[conn] = time.monotonic()

    async def _check_if_idle(self, conn: Connection) -> None:
        """Ping a connection that sat idle longer than `idle_check_seconds`; a failed ping discards it."""
        returned = self._returned_at.get(conn)
        if returned is None or time.monotonic() - returned >= self.settings.idle_check_seconds:
            await conn.execute("")

    def _connect_errors(self) -> int:
        return int(self.pool.get_stats().get("connections_errors", 0))

    def pool_figures(self) -> dict[str, int]:
        """In use / size / waiting, for /metrics (this server process)."""
        stats = self.pool.get_stats()
        size = int(stats.get("pool_size", 0))
        return {
            "size": size,
            "in_use": size - int(stats.get("pool_available", 0)),
            "waiting": self._waiting,
            "max_size": self.pool.max_size,
        }
