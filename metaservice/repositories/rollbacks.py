"""SQL for rollbacks: the stored plans, and the surgery on snapshot ranges, job runs and jobs that applies one.

Every statement that removes history returns the removed (or cut) rows as JSON, so the caller can keep them
in `rollbacks.forgotten`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY, BIGINT
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import Rollback, Table

_IDS = ARRAY(BIGINT)

_DELETE_RANGES_AFTER = text(
    """
    DELETE FROM snapshot_ranges r USING tables t
     WHERE t.id = r.table_id AND r.table_id = ANY(:table_ids) AND r.first_barrier > :barrier
    RETURNING to_jsonb(r) || jsonb_build_object('table', t.name)
    """
).bindparams(bindparam("table_ids", type_=_IDS))

# The range covering the barrier ends there; the old end is returned for the record.
_CUT_RANGES_AT = text(
    """
    WITH old AS (
        SELECT r.id, r.last_barrier FROM snapshot_ranges r
         WHERE r.table_id = ANY(:table_ids) AND r.first_barrier <= :barrier
           AND (r.last_barrier IS NULL OR r.last_barrier > :barrier)
           FOR UPDATE
    )
    UPDATE snapshot_ranges r SET last_barrier = :barrier, updated_at = now()
      FROM old, tables t
     WHERE r.id = old.id AND t.id = r.table_id
    RETURNING jsonb_build_object('table', t.name, 'first_barrier', r.first_barrier,
                                 'last_barrier_before', old.last_barrier, 'snapshot_id', r.snapshot_id, 'kind', r.kind)
    """
).bindparams(bindparam("table_ids", type_=_IDS))

_DELETE_RUNS_AFTER = text(
    """
    DELETE FROM job_runs r USING jobs j
     WHERE j.id = r.job_id AND r.job_id = ANY(:job_ids) AND r.first_barrier > :barrier
    RETURNING to_jsonb(r) || jsonb_build_object('job', j.name)
    """
).bindparams(bindparam("job_ids", type_=_IDS))

# Idle stretches that run past the barrier end there (processed runs cover one barrier only).
_CUT_RUNS_AT = text(
    """
    WITH old AS (
        SELECT r.id, r.barrier FROM job_runs r
         WHERE r.job_id = ANY(:job_ids) AND r.first_barrier <= :barrier AND r.barrier > :barrier
           FOR UPDATE
    )
    UPDATE job_runs r SET barrier = :barrier
      FROM old, jobs j
     WHERE r.id = old.id AND j.id = r.job_id
    RETURNING jsonb_build_object('job', j.name, 'first_barrier', r.first_barrier, 'barrier_before', old.barrier,
                                 'status', r.status)
    """
).bindparams(bindparam("job_ids", type_=_IDS))

_REWIND_JOBS = text(
    """
    UPDATE jobs SET last_barrier = :barrier WHERE id = ANY(:job_ids) AND last_barrier > :barrier
    """
).bindparams(bindparam("job_ids", type_=_IDS))

_PLANNED_RESTORES = text(
    """
    SELECT id, (plan -> 'tables' -> :table ->> 'restore_snapshot_id')::bigint
      FROM rollbacks
     WHERE status = 'planned' AND plan -> 'tables' ? :table
     ORDER BY created_at, id
    """
)


async def insert(
    session: AsyncSession, *, rollback_id: str, table_id: int, barrier: int, plan: dict[str, Any]
) -> Rollback:
    rollback = Rollback(id=rollback_id, table_id=table_id, barrier=barrier, plan=plan, status="planned")
    session.add(rollback)
    await session.flush()
    await session.refresh(rollback)
    return rollback


async def get(session: AsyncSession, *, rollback_id: str) -> Rollback | None:
    return await session.get(Rollback, rollback_id)


async def lock(session: AsyncSession, *, rollback_id: str) -> Rollback | None:
    """Load a rollback and hold its row lock: one completion or cancellation at a time."""
    return await session.scalar(
        select(Rollback).where(Rollback.id == rollback_id).with_for_update(),
        execution_options={"populate_existing": True},
    )


async def finish(
    session: AsyncSession, *, rollback_id: str, status: str, forgotten: dict[str, Any] | None = None
) -> Rollback:
    """Mark the rollback completed (with what it forgot) or cancelled, stamped by the database clock."""
    values: dict[str, Any] = {"status": status, f"{status}_at": func.now()}
    if forgotten is not None:
        values["forgotten"] = forgotten
    rollback: Rollback | None = await session.scalar(
        update(Rollback).where(Rollback.id == rollback_id).values(**values).returning(Rollback),
        execution_options={"populate_existing": True},
    )
    assert rollback is not None
    return rollback


async def planned_restores(session: AsyncSession, *, table: str) -> list[tuple[str, int]]:
    """(rollback id, restore snapshot) of every planned rollback that will restore `table`."""
    rows = await session.execute(_PLANNED_RESTORES, {"table": table})
    return [(str(r[0]), int(r[1])) for r in rows]


async def delete_ranges_after(session: AsyncSession, *, table_ids: Sequence[int], barrier: int) -> list[Any]:
    """Remove the tables' snapshot ranges that start after `barrier`; returns them."""
    result = await session.execute(_DELETE_RANGES_AFTER, {"table_ids": list(table_ids), "barrier": barrier})
    return [r[0] for r in result]


async def cut_ranges_at(session: AsyncSession, *, table_ids: Sequence[int], barrier: int) -> list[Any]:
    """End the tables' ranges that cover `barrier` and run past it at `barrier`; returns what was cut."""
    result = await session.execute(_CUT_RANGES_AT, {"table_ids": list(table_ids), "barrier": barrier})
    return [r[0] for r in result]


async def delete_runs_after(session: AsyncSession, *, job_ids: Sequence[int], barrier: int) -> list[Any]:
    """Remove the jobs' runs that start after `barrier`; returns them."""
    result = await session.execute(_DELETE_RUNS_AFTER, {"job_ids": list(job_ids), "barrier": barrier})
    return [r[0] for r in result]


async def cut_runs_at(session: AsyncSession, *, job_ids: Sequence[int], barrier: int) -> list[Any]:
    """End the jobs' idle stretches that run past `barrier` at `barrier`; returns what was cut."""
    result = await session.execute(_CUT_RUNS_AT, {"job_ids": list(job_ids), "barrier": barrier})
    return [r[0] for r in result]


async def rewind_jobs(session: AsyncSession, *, job_ids: Sequence[int], barrier: int) -> None:
    """Jobs past `barrier` go back to it: their next step is the barrier after it."""
    await session.execute(_REWIND_JOBS, {"job_ids": list(job_ids), "barrier": barrier})


async def reset_latest(session: AsyncSession, *, table_id: int, snapshot_id: int) -> None:
    """Set the newest known snapshot of a table, also backwards (the snapshots after it were rolled back)."""
    await session.execute(
        update(Table)
        .where(Table.id == table_id)
        .values(latest_snapshot_id=snapshot_id, latest_snapshot_at=func.now())
        .execution_options(synchronize_session=False)
    )
