"""SQL for snapshot ranges: which snapshot each table holds for which barriers (read by inspection and rollback;
the protocol writes them in one statement, see protocol.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from metaservice.db.database import Connection
from metaservice.repositories.driver import execute, fetch_as, id_array


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
_LAST_COMPLETE = f"""
    SELECT r.{_COLUMNS.replace(", ", ", r.")}
      FROM unnest(CAST(%(table_ids)s AS bigint[])) AS t(table_id)
      JOIN LATERAL (
            SELECT s.* FROM snapshot_ranges s WHERE s.table_id = t.table_id AND s.snapshot_id IS NOT NULL
             ORDER BY s.first_barrier DESC LIMIT 1) r ON true
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


async def covering(conn: Connection, *, table_ids: Sequence[int], barrier: int) -> dict[int, RangeRow]:
    """For each table, the range that holds at `barrier`; tables without one are left out."""
    rows = await fetch_as(conn, RangeRow, _COVERING, {"table_ids": id_array(table_ids), "barrier": barrier})
    return {row.table_id: row for row in rows}


async def last(conn: Connection, *, table_ids: Sequence[int]) -> dict[int, RangeRow]:
    """For each table, its newest range; tables that never held one are left out."""
    rows = await fetch_as(conn, RangeRow, _LAST, {"table_ids": id_array(table_ids)})
    return {row.table_id: row for row in rows}


async def last_complete(conn: Connection, *, table_ids: Sequence[int]) -> dict[int, RangeRow]:
    """For each table, its newest range holding a snapshot."""
    rows = await fetch_as(conn, RangeRow, _LAST_COMPLETE, {"table_ids": id_array(table_ids)})
    return {row.table_id: row for row in rows}


async def insert_range(
    conn: Connection,
    *,
    table_id: int,
    first: int,
    last: int | None,
    snapshot_id: int | None,
    kind: str,
    job_id: int | None,
) -> None:
    params = {"table_id": table_id, "first": first, "last": last, "snapshot_id": snapshot_id, "kind": kind}
    await execute(conn, _INSERT, {**params, "job_id": job_id})


async def extend(conn: Connection, *, range_id: int, through: int | None) -> None:
    """Let a range hold through a later barrier (or, with None, open-ended)."""
    await execute(conn, _EXTEND, {"id": range_id, "through": through})


async def close_open(conn: Connection, *, table_id: int, through: int) -> None:
    """Close the table's open-ended range at `through` (a root table that gets a writer)."""
    await execute(conn, _CLOSE_OPEN, {"table_id": table_id, "through": through})


async def history(conn: Connection, *, table_id: int, limit: int, before_barrier: int | None = None) -> list[RangeRow]:
    """The table's ranges, newest first (before `before_barrier`, when given)."""
    before = before_barrier if before_barrier is not None else 2**63 - 1
    return await fetch_as(conn, RangeRow, _HISTORY, {"table_id": table_id, "before": before, "limit": limit})
