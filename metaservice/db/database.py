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

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout, TooManyRequests

from metaservice.settings import Settings, primary_conninfo

Connection = psycopg.AsyncConnection[Any]
logger = logging.getLogger("metaservice.db")


class Database:
    """A pool of autocommit connections with the server's timeouts and the transaction deadline; nothing else.

    Built and opened in the app's lifespan (or by the CLI); closed on shutdown.
    """

    def __init__(self, settings: Settings, *, application_name: str = "metaservice") -> None:
        self.settings = settings
        self.deadline = settings.transaction_deadline()
        self.conninfo = primary_conninfo(settings.libpq_url())  # only a server that takes writes (failover)
        dead = settings.dead_connection_seconds
        self.connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "application_name": application_name,
            "connect_timeout": max(1, int(settings.connect_timeout)),
            # A host that vanishes without closing the connection (a network cut, a dead machine) is noticed
            # within about `dead_connection_seconds`: keepalive probes after a third of it idle, one a second,
            # three lost end the connection; data unacknowledged that long ends it too (TCP only: libpq ignores
            # these on unix sockets).
            "keepalives": 1,
            "keepalives_idle": max(1, int(dead / 3)),
            "keepalives_interval": 1,
            "keepalives_count": 3,
            "tcp_user_timeout": int(dead * 1000),
            # Generic plans: the hot statements are prepared once per connection and called with parameters
            # whose shapes vary (a gather with and without input windows, writes of 1-3 rows). Left to choose,
            # PostgreSQL re-planned a sixth of the gathers (~1.5 ms each) and a quarter of the writes under
            # the cycle's load; forced, it plans each statement once per connection (docs/design.md).
            # Times in UTC, as the API gives them: psycopg then loads a timestamp with no conversion into the
            # server's named zone (an `Etc/UTC` default cost twice as much: 40,000 of them, the times of a
            # 20,000-node lineage answer, 27 -> 13 ms).
            "options": f"-c statement_timeout={settings.statement_timeout_ms} "
            f"-c lock_timeout={settings.lock_timeout_ms} -c plan_cache_mode=force_generic_plan -c TimeZone=UTC",
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
        # Bumped when a connection met a server that no longer takes writes (a demoted primary): every connection
        # made before is replaced, the pooled ones by a drain, the dedicated ones before their next use.
        self.generation = 0
        self._draining: asyncio.Task[None] | None = None
        self._in_flight: set[anyio.CancelScope] = set()  # statements a retirement interrupts (`retirable`)

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
        except psycopg.errors.ReadOnlySqlTransaction:
            with anyio.CancelScope(shield=True):
                await conn.close()  # the pool discards a closed connection
            self.retire("a pooled connection reached a read-only server")
            raise
        finally:
            with anyio.CancelScope(shield=True):  # a connection given back half-way would be lost to the pool
                await self.pool.putconn(conn)

    async def open(self) -> None:
        """Open the pool (waiting for its first connections, so a wrong URL fails at start-up)."""
        await self.pool.open(wait=True, timeout=self.settings.connect_timeout + self.settings.pool_timeout)

    async def close(self) -> None:
        """Close the pool (close the `Runtime` built over it first: its waiters answer before the pool goes)."""
        if self._draining is not None:
            await asyncio.gather(self._draining, return_exceptions=True)
        await self.pool.close(timeout=5)

    async def connect(self) -> Connection:
        """A dedicated connection outside the pool (a coalescer's, the listener's), with the same options."""
        return await psycopg.AsyncConnection.connect(self.conninfo, **self.connect_kwargs)

    def retire(self, what: str, *, interrupt: bool = False) -> None:
        """Replace every database connection: `what` shows that the server they were made to is no longer the
        primary: a connection reached a server that refuses writes (SQLSTATE 25006: a primary that came back as a
        standby, behind an address that moved late), or one went unanswered past every timeout PostgreSQL itself
        applies (the host vanished without closing it). Every pooled connection is replaced (psycopg's drain;
        those in use when they come back) and every dedicated one before its next statement (`generation`). New
        connections only accept a server that takes writes (`target_session_attrs=read-write`), so they reach the
        new primary once the address points at it. With `interrupt` (the host is gone), the work waiting on those
        connections (`retirable`) is interrupted instead of waiting for its deadline."""
        self.generation += 1
        logger.warning("%s: replacing every database connection", what)
        if interrupt:
            for scope in list(self._in_flight):  # waiting on a vanished host: they would wait until their deadline
                scope.cancel()
        if self._draining is None or self._draining.done():
            self._draining = asyncio.get_running_loop().create_task(self.pool.drain(), name="metaservice-drain")

    @contextmanager
    def retirable(self) -> Iterator[None]:
        """Database work that `retire()` interrupts: its connection is one of those given up, so waiting for its
        answer is waiting for a host that is gone. Raises `ConnectionError` when interrupted."""
        with anyio.CancelScope() as scope:
            self._in_flight.add(scope)
            try:
                yield
            finally:
                self._in_flight.discard(scope)
        if scope.cancelled_caught:
            raise ConnectionError("the connection was retired: its server is no longer the primary")

    async def _mark_returned(self, conn: Connection) -> None:
        self._returned_at[conn] = time.monotonic()

    async def _check_if_idle(self, conn: Connection) -> None:
        """Ping a connection that sat idle longer than `idle_check_seconds`; a failed ping discards it."""
        returned = self._returned_at.get(conn)
        if returned is None or time.monotonic() - returned >= self.settings.idle_check_seconds:
            with anyio.fail_after(self.settings.connect_timeout):  # a vanished host never answers: discard it
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
