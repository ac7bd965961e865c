"""SQL for jobs."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from metaservice.db.models import Job


async def get(session: AsyncSession, *, name: str) -> Job | None:
    return await session.scalar(select(Job).where(Job.name == name))


async def lock(session: AsyncSession, *, name: str) -> Job | None:
    """Load a job and hold its row lock until the transaction ends (serializes one job's protocol steps)."""
    # populate_existing: a row loaded earlier in this session must not hide what the lock waited for
    return await session.scalar(
        select(Job).where(Job.name == name).with_for_update().execution_options(populate_existing=True)
    )


async def lock_and_touch(session: AsyncSession, *, name: str) -> Job | None:
    """`lock` and mark the job as seen now, in one statement: an UPDATE takes the same row lock."""
    statement = update(Job).where(Job.name == name).values(last_seen_at=func.now()).returning(Job)
    return await session.scalar(statement, execution_options={"populate_existing": True})


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


async def deactivate(session: AsyncSession, *, job_id: int) -> None:
    await session.execute(update(Job).where(Job.id == job_id).values(is_active=False, unregistered_at=func.now()))


async def list_all(session: AsyncSession, *, limit: int, after_name: str | None = None) -> list[Job]:
    query = select(Job).order_by(Job.name).limit(limit)
    if after_name is not None:
        query = query.where(Job.name > after_name)
    return list(await session.scalars(query))


class IssueContext(NamedTuple):
    """What `next` needs to know, before the job's transaction, to decide whether to issue a barrier."""

    is_active: bool
    in_flight: bool
    unsealed_sources: bool  # a root input has a snapshot that no barrier sealed yet (read without locks)
    source_ids: list[int]


_ISSUE_CONTEXT = text(
    """
    SELECT j.is_active,
           EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = j.id AND r.status = 'in_flight') AS in_flight,
           EXISTS (SELECT 1 FROM lineage_edges s
                     JOIN tables t ON t.id = s.table_id
                     LEFT JOIN snapshot_ranges r ON r.table_id = t.id AND r.last_barrier IS NULL
                    WHERE s.job_id = j.id AND s.role = 'source' AND t.latest_snapshot_id IS NOT NULL
                      AND NOT EXISTS (SELECT 1 FROM lineage_edges w WHERE w.table_id = t.id AND w.role = 'sink')
                      AND (r.id IS NULL OR r.snapshot_id IS DISTINCT FROM t.latest_snapshot_id)
                  ) AS unsealed_sources,
           ARRAY(SELECT s.table_id FROM lineage_edges s WHERE s.job_id = j.id AND s.role = 'source') AS source_ids
      FROM jobs j
     WHERE j.name = :name
    """
)


async def issue_context(connection: AsyncConnection | AsyncSession, *, name: str) -> IssueContext | None:
    """The job's state for barrier issuing, in one round trip; None when the job is not registered."""
    row = (await connection.execute(_ISSUE_CONTEXT, {"name": name})).one_or_none()
    if row is None:
        return None
    return IssueContext(bool(row.is_active), bool(row.in_flight), bool(row.unsealed_sources), list(row.source_ids))
