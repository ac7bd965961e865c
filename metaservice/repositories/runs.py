"""SQL for job runs: each job's barrier history.

Read and written several times per protocol call: the statements go through the driver
(`repositories/driver.py`) and runs come back as `RunRow`s, always fresh from the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import JobRun
from metaservice.repositories.driver import execute, fetch_as, fetch_one_as


@dataclass(slots=True)
class RunRow:
    """One row of `job_runs`: what the job did for the barriers first_barrier … barrier."""

    id: int
    job_id: int
    first_barrier: int
    barrier: int
    status: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    reason: str | None
    inputs_ready_at: datetime | None
    started_at: datetime
    finished_at: datetime | None


_COLUMNS = (
    "id, job_id, first_barrier, barrier, status, inputs, outputs, reason, inputs_ready_at, started_at, finished_at"
)
_IN_FLIGHT = f"SELECT {_COLUMNS} FROM job_runs WHERE job_id = %(job_id)s AND status = 'in_flight'"
_AT = f"""
    SELECT {_COLUMNS} FROM job_runs
     WHERE job_id = %(job_id)s AND first_barrier <= %(barrier)s AND barrier >= %(barrier)s
     ORDER BY first_barrier DESC LIMIT 1
"""
_LAST = f"SELECT {_COLUMNS} FROM job_runs WHERE job_id = %(job_id)s ORDER BY first_barrier DESC LIMIT 1"
_LAST_COMMITTED = f"""
    SELECT {_COLUMNS} FROM job_runs WHERE job_id = %(job_id)s AND status = 'committed'
     ORDER BY barrier DESC LIMIT 1
"""
_INSERT = f"""
    INSERT INTO job_runs (job_id, first_barrier, barrier, status, inputs, outputs, reason, inputs_ready_at,
                          started_at, finished_at)
    VALUES (%(job_id)s, %(first)s, %(barrier)s, %(status)s, %(inputs)s, '{{}}'::jsonb, %(reason)s,
            %(inputs_ready_at)s, clock_timestamp(), CASE WHEN %(finished)s THEN clock_timestamp() END)
    RETURNING {_COLUMNS}
"""
_EXTEND = "UPDATE job_runs SET barrier = %(through)s, finished_at = clock_timestamp() WHERE id = %(id)s"
_FINISH = f"""
    UPDATE job_runs
       SET status = %(status)s, finished_at = clock_timestamp(),
           outputs = COALESCE(%(outputs)s, outputs), reason = COALESCE(%(reason)s, reason)
     WHERE id = %(id)s
    RETURNING {_COLUMNS}
"""
_HISTORY = f"""
    SELECT {_COLUMNS} FROM job_runs WHERE job_id = %(job_id)s AND first_barrier < %(before)s
     ORDER BY first_barrier DESC LIMIT %(limit)s
"""


async def in_flight(session: AsyncSession, *, job_id: int) -> RunRow | None:
    return await fetch_one_as(session, RunRow, _IN_FLIGHT, {"job_id": job_id})


async def at(session: AsyncSession, *, job_id: int, barrier: int) -> RunRow | None:
    """The run that covers `barrier` for the job, if any."""
    return await fetch_one_as(session, RunRow, _AT, {"job_id": job_id, "barrier": barrier})


async def last(session: AsyncSession, *, job_id: int) -> RunRow | None:
    return await fetch_one_as(session, RunRow, _LAST, {"job_id": job_id})


async def last_committed(session: AsyncSession, *, job_id: int) -> RunRow | None:
    return await fetch_one_as(session, RunRow, _LAST_COMMITTED, {"job_id": job_id})


async def insert_run(
    session: AsyncSession,
    *,
    job_id: int,
    first: int,
    barrier: int,
    status: str,
    inputs: dict[str, Any],
    reason: str | None = None,
    inputs_ready_at: datetime | None = None,
    finished: bool = False,
) -> RunRow:
    params = {"job_id": job_id, "first": first, "barrier": barrier, "status": status, "inputs": Jsonb(inputs)}
    params |= {"reason": reason, "inputs_ready_at": inputs_ready_at, "finished": finished}
    run = await fetch_one_as(session, RunRow, _INSERT, params)
    assert run is not None
    return run


async def extend(session: AsyncSession, *, run_id: int, through: int) -> None:
    """An idle or skipped stretch grows by more barriers instead of adding rows."""
    await execute(session, _EXTEND, {"id": run_id, "through": through})


async def finish(
    session: AsyncSession,
    *,
    run_id: int,
    status: str,
    outputs: dict[str, Any] | None = None,
    reason: str | None = None,
) -> RunRow:
    params = {"id": run_id, "status": status, "outputs": None if outputs is None else Jsonb(outputs), "reason": reason}
    run = await fetch_one_as(session, RunRow, _FINISH, params)
    assert run is not None
    return run


async def history(session: AsyncSession, *, job_id: int, limit: int, before_barrier: int | None = None) -> list[RunRow]:
    """The job's runs, newest first (before `before_barrier`, when given)."""
    before = before_barrier if before_barrier is not None else 2**63 - 1
    return await fetch_as(session, RunRow, _HISTORY, {"job_id": job_id, "before": before, "limit": limit})


async def in_flight_reading(session: AsyncSession, *, table: str) -> list[tuple[str, int, dict[str, Any]]]:
    """(job name, barrier, inputs entry) of every in-flight run that reads `table`."""
    from metaservice.db.models import Job

    rows = await session.execute(
        select(Job.name, JobRun.barrier, JobRun.inputs[table])
        .join(Job, Job.id == JobRun.job_id)
        .where(JobRun.status == "in_flight", JobRun.inputs.has_key(table))
    )
    return [(str(r[0]), int(r[1]), dict(r[2])) for r in rows]
