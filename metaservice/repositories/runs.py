"""SQL for job runs: each job's barrier history."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import JobRun


async def in_flight(session: AsyncSession, *, job_id: int) -> JobRun | None:
    return await session.scalar(select(JobRun).where(JobRun.job_id == job_id, JobRun.status == "in_flight"))


async def at(session: AsyncSession, *, job_id: int, barrier: int) -> JobRun | None:
    """The run that covers `barrier` for the job, if any."""
    return await session.scalar(
        select(JobRun)
        .where(JobRun.job_id == job_id, JobRun.first_barrier <= barrier, JobRun.barrier >= barrier)
        .order_by(JobRun.first_barrier.desc())
        .limit(1)
    )


async def last(session: AsyncSession, *, job_id: int) -> JobRun | None:
    return await session.scalar(
        select(JobRun).where(JobRun.job_id == job_id).order_by(JobRun.first_barrier.desc()).limit(1)
    )


async def last_committed(session: AsyncSession, *, job_id: int) -> JobRun | None:
    return await session.scalar(
        select(JobRun)
        .where(JobRun.job_id == job_id, JobRun.status == "committed")
        .order_by(JobRun.barrier.desc())
        .limit(1)
    )


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
) -> JobRun:
    run = JobRun(
        job_id=job_id,
        first_barrier=first,
        barrier=barrier,
        status=status,
        inputs=inputs,
        outputs={},
        reason=reason,
        inputs_ready_at=inputs_ready_at,
        started_at=func.clock_timestamp(),
        finished_at=func.clock_timestamp() if finished else None,
    )
    session.add(run)
    await session.flush()
    await session.refresh(run)
    return run


async def extend(session: AsyncSession, *, run_id: int, through: int) -> None:
    """An idle or skipped stretch grows by more barriers instead of adding rows."""
    await session.execute(
        update(JobRun)
        .where(JobRun.id == run_id)
        .values(barrier=through, finished_at=func.clock_timestamp())
        .execution_options(synchronize_session=False)
    )


async def finish(
    session: AsyncSession,
    *,
    run_id: int,
    status: str,
    outputs: dict[str, Any] | None = None,
    reason: str | None = None,
) -> JobRun:
    values: dict[str, Any] = {"status": status, "finished_at": func.clock_timestamp()}
    if outputs is not None:
        values["outputs"] = outputs
    if reason is not None:
        values["reason"] = reason
    run: JobRun | None = await session.scalar(
        update(JobRun).where(JobRun.id == run_id).values(**values).returning(JobRun),
        execution_options={"populate_existing": True},
    )
    assert run is not None
    return run


async def history(session: AsyncSession, *, job_id: int, limit: int, before_barrier: int | None = None) -> list[JobRun]:
    query = select(JobRun).where(JobRun.job_id == job_id).order_by(JobRun.first_barrier.desc()).limit(limit)
    if before_barrier is not None:
        query = query.where(JobRun.first_barrier < before_barrier)
    return list(await session.scalars(query))


async def in_flight_reading(session: AsyncSession, *, table: str) -> list[tuple[str, int, dict[str, Any]]]:
    """(job name, barrier, inputs entry) of every in-flight run that reads `table`."""
    from metaservice.db.models import Job

    rows = await session.execute(
        select(Job.name, JobRun.barrier, JobRun.inputs[table])
        .join(Job, Job.id == JobRun.job_id)
        .where(JobRun.status == "in_flight", JobRun.inputs.has_key(table))
    )
    return [(str(r[0]), int(r[1]), dict(r[2])) for r in rows]
