"""SQL for jobs."""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import Job


async def get(session: AsyncSession, *, name: str) -> Job | None:
    return await session.scalar(select(Job).where(Job.name == name))


async def lock(session: AsyncSession, *, name: str) -> Job | None:
    """Load a job and hold its row lock until the transaction ends (serializes one job's protocol steps)."""
    # populate_existing: a row loaded earlier in this session must not hide what the lock waited for
    return await session.scalar(
        select(Job).where(Job.name == name).with_for_update().execution_options(populate_existing=True)
    )


async def upsert_active(session: AsyncSession, *, name: str) -> Job:
    """Create the job on first sight or reactivate it; returns it locked by this transaction."""
    statement = (
        insert(Job)
        .values(name=name)
        .on_conflict_do_update(
            index_elements=[Job.name],
            set_={"is_active": True, "unregistered_at": None, "last_seen_at": func.now()},
        )
        .returning(Job)
    )
    job = await session.scalar(statement, execution_options={"populate_existing": True})
    assert job is not None
    return job


async def set_last_barrier(session: AsyncSession, *, job_id: int, barrier: int) -> None:
    await session.execute(update(Job).where(Job.id == job_id).values(last_barrier=barrier, last_seen_at=func.now()))


async def touch(session: AsyncSession, *, job_id: int) -> None:
    await session.execute(update(Job).where(Job.id == job_id).values(last_seen_at=func.now()))


async def deactivate(session: AsyncSession, *, job_id: int) -> None:
    await session.execute(update(Job).where(Job.id == job_id).values(is_active=False, unregistered_at=func.now()))


async def list_all(session: AsyncSession, *, limit: int, after_name: str | None = None) -> list[Job]:
    query = select(Job).order_by(Job.name).limit(limit)
    if after_name is not None:
        query = query.where(Job.name > after_name)
    return list(await session.scalars(query))
