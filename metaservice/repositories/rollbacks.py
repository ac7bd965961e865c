"""SQL for rollbacks: the stored plans, and the surgery on snapshot ranges, job runs and jobs that applies one.

Every statement that removes history returns the removed (or cut) rows as JSON, so the caller can keep them
in `rollbacks.forgotten`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from metaservice.db.database import Connection
from metaservice.repositories.driver import execute, fetch_all, fetch_one_as

_COLUMNS = "id, table_id, barrier, plan, status, forgotten, created_at, completed_at, cancelled_at"


@dataclass(slots=True)
class RollbackRow:
    id: str
    table_id: int
    barrier: int
    plan: dict[str, Any]
    status: str
    forgotten: dict[str, Any] | None
    created_at: datetime
    completed_at: datetime | None
    cancelled_at: datetime | None


_INSERT = f"""
    INSERT INTO rollbacks (id, table_id, barrier, plan, status)
    VALUES (%(id)s, %(table)s, %(barrier)s, %(plan)s, 'planned')
    RETURNING {_COLUMNS}
"""
_GET = f"SELECT {_COLUMNS} FROM rollbacks WHERE id = %(id)s"
_LOCK = f"SELECT {_COLUMNS} FROM rollbacks WHERE id = %(id)s FOR UPDATE"
_FINISH = f"""
    UPDATE rollbacks SET status = %(status)s, forgotten = coalesce(%(forgotten)s, forgotten),
                         completed_at = CASE WHEN %(status)s = 'completed' THEN now() ELSE completed_at END,
                         cancelled_at = CASE WHEN %(status)s = 'cancelled' THEN now() ELSE cancelled_at END
     WHERE id = %(id)s
    RETURNING {_COLUMNS}
"""
_PLANNED_RESTORES = """
    SELECT id, (plan -> 'tables' -> %(table)s ->> 'restore_snapshot_id')::bigint
      FROM rollbacks
     WHERE status = 'planned' AND plan -> 'tables' ? %(table)s
     ORDER BY created_at, id
"""
_LOCK_TABLES = """
    UPDATE tables SET seal_candidate = true
     WHERE id IN (SELECT id FROM tables WHERE id = ANY(%(ids)s) ORDER BY id FOR NO KEY UPDATE)
"""
_DELETE_RANGES_AFTER = """
    DELETE FROM snapshot_ranges r USING tables t
     WHERE t.id = r.table_id AND r.table_id = ANY(%(ids)s) AND r.first_barrier > %(barrier)s
    RETURNING to_jsonb(r) || jsonb_build_object('table', t.name)
"""
# The range covering the barrier ends there; the old end is returned for the record.
_CUT_RANGES_AT = """
    WITH old AS (
        SELECT r.id, r.last_barrier FROM snapshot_ranges r
         WHERE r.table_id = ANY(%(ids)s) AND r.first_barrier <= %(barrier)s
           AND (r.last_barrier IS NULL OR r.last_barrier > %(barrier)s)
           FOR UPDATE
    )
    UPDATE snapshot_ranges r SET last_barrier = %(barrier)s, updated_at = now()
      FROM old, tables t
     WHERE r.id = old.id AND t.id = r.table_id
    RETURNING jsonb_build_object('table', t.name, 'first_barrier', r.first_barrier,
                                 'last_barrier_before', old.last_barrier, 'snapshot_id', r.snapshot_id, 'kind', r.kind)
"""
_DELETE_RUNS_AFTER = """
    DELETE FROM job_runs r USING jobs j
     WHERE j.id = r.job_id AND r.job_id = ANY(%(ids)s) AND r.first_barrier > %(barrier)s
    RETURNING to_jsonb(r) || jsonb_build_object('job', j.name)
"""
# Idle stretches that run past the barrier end there (processed runs cover one barrier only).
_CUT_RUNS_AT = """
    WITH old AS (
        SELECT r.id, r.barrier FROM job_runs r
         WHERE r.job_id = ANY(%(ids)s) AND r.first_barrier <= %(barrier)s AND r.barrier > %(barrier)s
           FOR UPDATE
    )
    UPDATE job_runs r SET barrier = %(barrier)s
      FROM old, jobs j
     WHERE r.id = old.id AND j.id = r.job_id
    RETURNING jsonb_build_object('job', j.name, 'first_barrier', r.first_barrier, 'barrier_before', old.barrier,
                                 'status', r.status)
"""
# Jobs past the barrier go back to it; every job of the scope plans again (version).
_REWIND_JOBS = """
    UPDATE jobs SET last_barrier = CASE WHEN last_barrier > %(barrier)s THEN %(barrier)s ELSE last_barrier END,
                    version = version + 1
     WHERE id = ANY(%(ids)s)
"""
_RESET_LATEST = """
    UPDATE tables SET latest_snapshot_id = %(snapshot)s, latest_snapshot_at = now() WHERE id = %(id)s
"""


async def insert(
    conn: Connection, *, rollback_id: str, table_id: int, barrier: int, plan: dict[str, Any]
) -> RollbackRow:
    params = {"id": rollback_id, "table": table_id, "barrier": barrier, "plan": Jsonb(plan)}
    row = await fetch_one_as(conn, RollbackRow, _INSERT, params)
    assert row is not None
    return row


async def get(conn: Connection, *, rollback_id: str) -> RollbackRow | None:
    return await fetch_one_as(conn, RollbackRow, _GET, {"id": rollback_id})


async def lock(conn: Connection, *, rollback_id: str) -> RollbackRow | None:
    """Load a rollback and hold its row lock: one completion or cancellation at a time."""
    return await fetch_one_as(conn, RollbackRow, _LOCK, {"id": rollback_id})


async def finish(
    conn: Connection, *, rollback_id: str, status: str, forgotten: dict[str, Any] | None = None
) -> RollbackRow:
    """Mark the rollback completed (with what it forgot) or cancelled, stamped by the database clock."""
    params = {"id": rollback_id, "status": status, "forgotten": None if forgotten is None else Jsonb(forgotten)}
    row = await fetch_one_as(conn, RollbackRow, _FINISH, params)
    assert row is not None
    return row


async def planned_restores(conn: Connection, *, table: str) -> list[tuple[str, int]]:
    """(rollback id, restore snapshot) of every planned rollback that will restore `table`."""
    return [(str(r[0]), int(r[1])) for r in await fetch_all(conn, _PLANNED_RESTORES, {"table": table})]


async def lock_tables(conn: Connection, *, table_ids: Sequence[int]) -> None:
    """Lock the tables' rows, in id order, before the clock: the order the allocation function locks in. They are
    marked as seal candidates: the rollback may move a root's newest snapshot or ranges (migration 2026-11-24-2200)."""
    await execute(conn, _LOCK_TABLES, {"ids": list(table_ids)})


async def delete_ranges_after(conn: Connection, *, table_ids: Sequence[int], barrier: int) -> list[Any]:
    """Remove the tables' snapshot ranges that start after `barrier`; returns them."""
    rows = await fetch_all(conn, _DELETE_RANGES_AFTER, {"ids": list(table_ids), "barrier": barrier})
    return [r[0] for r in rows]


async def cut_ranges_at(conn: Connection, *, table_ids: Sequence[int], barrier: int) -> list[Any]:
    """End the tables' ranges that cover `barrier` and run past it at `barrier`; returns what was cut."""
    return [r[0] for r in await fetch_all(conn, _CUT_RANGES_AT, {"ids": list(table_ids), "barrier": barrier})]


async def delete_runs_after(conn: Connection, *, job_ids: Sequence[int], barrier: int) -> list[Any]:
    """Remove the jobs' runs that start after `barrier`; returns them."""
    return [r[0] for r in await fetch_all(conn, _DELETE_RUNS_AFTER, {"ids": list(job_ids), "barrier": barrier})]


async def cut_runs_at(conn: Connection, *, job_ids: Sequence[int], barrier: int) -> list[Any]:
    """End the jobs' idle stretches that run past `barrier` at `barrier`; returns what was cut."""
    return [r[0] for r in await fetch_all(conn, _CUT_RUNS_AT, {"ids": list(job_ids), "barrier": barrier})]


async def rewind_jobs(conn: Connection, *, job_ids: Sequence[int], barrier: int) -> None:
    """Jobs past `barrier` go back to it: their next step is the barrier after it."""
    await execute(conn, _REWIND_JOBS, {"ids": list(job_ids), "barrier": barrier})


async def reset_latest(conn: Connection, *, table_id: int, snapshot_id: int) -> None:
    """Set the newest known snapshot of a table, also backwards (the snapshots after it were rolled back)."""
    await execute(conn, _RESET_LATEST, {"id": table_id, "snapshot": snapshot_id})
