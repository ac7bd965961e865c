"""SQL for jobs. The protocol's row lock and bookkeeping go through the driver and return `JobRow`s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from metaservice.db.models import Job
from metaservice.repositories.driver import execute, fetch_one_as


@dataclass(slots=True)
class JobRow:
    """What the barrier protocol needs of a job. `last_barrier`: the newest barrier it settled."""

    id: int
    name: str
    is_active: bool
    last_barrier: int | None


_LOCK = "SELECT id, name, is_active, last_barrier FROM jobs WHERE name = %(name)s FOR UPDATE"
_LOCK_AND_TOUCH = (
    "UPDATE jobs SET last_seen_at = now() WHERE name = %(name)s RETURNING id, name, is_active, last_barrier"
)
_SET_LAST_BARRIER = "UPDATE jobs SET last_barrier = %(barrier)s, last_seen_at = now() WHERE id = %(id)s"


async def get(session: AsyncSession, *, name: str) -> Job | None:
    return await session.scalar(select(Job).where(Job.name == name))


async def lock(session: AsyncSession, *, name: str) -> JobRow | None:
    """Load a job and hold its row lock until the transaction ends (serializes one job's protocol steps)."""
    return await fetch_one_as(session, JobRow, _LOCK, {"name": name})


async def lock_and_touch(session: AsyncSession, *, name: str) -> JobRow | None:
    """`lock` and mark the job as seen now, in one statement: an UPDATE takes the same row lock."""
    return await fetch_one_as(session, JobRow, _LOCK_AND_TOUCH, {"name": name})


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
    await execute(session, _SET_LAST_BARRIER, {"id": job_id, "barrier": barrier})


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
