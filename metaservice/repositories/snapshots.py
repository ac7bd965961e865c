"""SQL for snapshot ranges: which snapshot each table holds for which barriers.

The barrier protocol reads and writes ranges several times per call, so these statements go through the driver
(`repositories/driver.py`) and ranges come back as `RangeRow`s, always fresh from the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.repositories.driver import execute, fetch_as, fetch_value, id_array


@dataclass(slots=True)
class RangeRow:
    """One row of `snapshot_ranges`: `table_id` holds `snapshot_id` (None: never complete) for the barriers
    first_barrier … last_barrier (None: open-ended, following seals)."""

    id: int
    table_id: int
    first_barrier: int
    last_barrier: int | None
    snapshot_id: int | None
    kind: str
    job_id: int | None
    created_at: datetime
    updated_at: datetime


_COLUMNS = "id, table_id, first_barrier, last_barrier, snapshot_id, kind, job_id, created_at, updated_at"

# One round trip each, one index probe per table.
_COVERING = f"""
    SELECT r.{_COLUMNS.replace(", ", ", r.")}
      FROM unnest(CAST(%(table_ids)s AS bigint[])) AS t(table_id)
      JOIN LATERAL (
            SELECT s.* FROM snapshot_ranges s
             WHERE s.table_id = t.table_id AND s.first_barrier <= %(barrier)s
             ORDER BY s.first_barrier DESC LIMIT 1) r ON true
     WHERE r.last_barrier IS NULL OR r.last_barrier >= %(barrier)s
"""

_LAST = f"""
    SELECT r.{_COLUMNS.replace(", ", ", r.")}
      FROM unnest(CAST(%(table_ids)s AS bigint[])) AS t(table_id)
      JOIN LATERAL (
            SELECT s.* FROM snapshot_ranges s WHERE s.table_id = t.table_id
             ORDER BY s.first_barrier DESC LIMIT 1) r ON true
"""

_LAST_SNAPSHOT = """
    SELECT snapshot_id FROM snapshot_ranges
     WHERE table_id = %(table_id)s AND snapshot_id IS NOT NULL
     ORDER BY first_barrier DESC LIMIT 1
"""

_INSERT = """
    INSERT INTO snapshot_ranges (table_id, first_barrier, last_barrier, snapshot_id, kind, job_id)
    VALUES (%(table_id)s, %(first)s, %(last)s, %(snapshot_id)s, %(kind)s, %(job_id)s)
"""

_EXTEND = "UPDATE snapshot_ranges SET last_barrier = %(through)s, updated_at = now() WHERE id = %(id)s"

_CLOSE_OPEN = """
    UPDATE snapshot_ranges SET last_barrier = %(through)s, updated_at = now()
     WHERE table_id = %(table_id)s AND last_barrier IS NULL
"""

_HISTORY = f"""
    SELECT {_COLUMNS} FROM snapshot_ranges
     WHERE table_id = %(table_id)s AND first_barrier < %(before)s
     ORDER BY first_barrier DESC LIMIT %(limit)s
"""


async def covering(session: AsyncSession, *, table_ids: Sequence[int], barrier: int) -> dict[int, RangeRow]:
    """For each table, the range that holds at `barrier`; tables without one are left out."""
    rows = await fetch_as(session, RangeRow, _COVERING, {"table_ids": id_array(table_ids), "barrier": barrier})
    return {row.table_id: row for row in rows}


async def last(session: AsyncSession, *, table_ids: Sequence[int]) -> dict[int, RangeRow]:
    """For each table, its newest range; tables that never held a snapshot are left out."""
    rows = await fetch_as(session, RangeRow, _LAST, {"table_ids": id_array(table_ids)})
    return {row.table_id: row for row in rows}


async def last_snapshot(session: AsyncSession, *, table_id: int) -> int | None:
    """The newest snapshot id the table completed any barrier with."""
    value = await fetch_value(session, _LAST_SNAPSHOT, {"table_id": table_id})
    return None if value is None else int(value)


async def insert_range(
    session: AsyncSession,
    *,
    table_id: int,
    first: int,
    last: int | None,
    snapshot_id: int | None,
    kind: str,
    job_id: int | None,
) -> None:
    params = {"table_id": table_id, "first": first, "last": last, "snapshot_id": snapshot_id, "kind": kind}
    await execute(session, _INSERT, {**params, "job_id": job_id})


async def extend(session: AsyncSession, *, range_id: int, through: int | None) -> None:
    """Let a range hold through a later barrier (or, with None, open-ended)."""
    await execute(session, _EXTEND, {"id": range_id, "through": through})


async def close_open(session: AsyncSession, *, table_id: int, through: int) -> None:
    """Close the table's open-ended range at `through` (a root table that gets a writer)."""
    await execute(session, _CLOSE_OPEN, {"table_id": table_id, "through": through})


async def history(
    session: AsyncSession, *, table_id: int, limit: int, before_barrier: int | None = None
) -> list[RangeRow]:
    """The table's ranges, newest first (before `before_barrier`, when given)."""
    before = before_barrier if before_barrier is not None else 2**63 - 1
    return await fetch_as(session, RangeRow, _HISTORY, {"table_id": table_id, "before": before, "limit": limit})
