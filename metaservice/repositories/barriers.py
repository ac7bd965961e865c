"""SQL for the global barrier sequence and its clock row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from metaservice.db.database import Connection
from metaservice.repositories.driver import fetch_as, fetch_one_as, fetch_value


@dataclass(slots=True)
class BarrierRow:
    barrier: int
    issued_at: datetime
    issued_by: str | None


_HEAD = "SELECT barrier, issued_at, issued_by FROM barriers ORDER BY barrier DESC LIMIT 1"
_GET = "SELECT barrier, issued_at, issued_by FROM barriers WHERE barrier = %(barrier)s"
_AFTER = "SELECT min(barrier) FROM barriers WHERE barrier > %(barrier)s"
_NEWEST = """
    SELECT barrier, issued_at, issued_by FROM barriers WHERE barrier < %(before)s ORDER BY barrier DESC LIMIT %(limit)s
"""
_CLOCK_SHARE = "SELECT last_barrier FROM barrier_clock WHERE id = 1 FOR SHARE"
_CLOCK_LOCK = "SELECT last_barrier FROM barrier_clock WHERE id = 1 FOR UPDATE"


async def clock_share(conn: Connection) -> int:
    """The newest barrier issued, holding the clock row in share mode until the transaction ends: no barrier is
    issued meanwhile, so a lineage change takes effect exactly at the first barrier issued after this value."""
    return int(await fetch_value(conn, _CLOCK_SHARE) or 0)


async def lock_clock(conn: Connection) -> int:
    """Hold the clock row until the transaction ends; returns the newest barrier issued so far (0: none)."""
    return int(await fetch_value(conn, _CLOCK_LOCK) or 0)


async def head(conn: Connection) -> BarrierRow | None:
    """The newest barrier issued, or None."""
    return await fetch_one_as(conn, BarrierRow, _HEAD)


async def get(conn: Connection, *, barrier: int) -> BarrierRow | None:
    return await fetch_one_as(conn, BarrierRow, _GET, {"barrier": barrier})


async def after(conn: Connection, *, barrier: int) -> int | None:
    """The first barrier issued after `barrier`."""
    value = await fetch_value(conn, _AFTER, {"barrier": barrier})
    return None if value is None else int(value)


async def newest(conn: Connection, *, limit: int, before_barrier: int | None = None) -> list[BarrierRow]:
    before = before_barrier if before_barrier is not None else 2**63 - 1
    return await fetch_as(conn, BarrierRow, _NEWEST, {"limit": limit, "before": before})
