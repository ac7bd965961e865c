"""SQL for the global barrier sequence."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import Barrier, BarrierClock

# One statement: bump the single clock row to max(previous + 1, now in µs) and record the barrier.
# The row lock on barrier_clock serializes allocations across every server process.
_ALLOCATE = text(
    """
    WITH next AS (
        UPDATE barrier_clock
           SET last_barrier = GREATEST(last_barrier + 1,
                                       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
         WHERE id = 1
     RETURNING last_barrier
    )
    INSERT INTO barriers (barrier, issued_at, issued_by)
    SELECT last_barrier, clock_timestamp(), :issued_by FROM next
    RETURNING barrier, issued_at
    """
)


class IssuedBarrier(NamedTuple):
    barrier: int
    issued_at: datetime


async def allocate(session: AsyncSession, *, issued_by: str | None) -> IssuedBarrier:
    """Issue the next barrier (strictly greater than every earlier one) within the caller's transaction."""
    row = (await session.execute(_ALLOCATE, {"issued_by": issued_by})).one()
    return IssuedBarrier(int(row.barrier), row.issued_at)


async def lock_clock(session: AsyncSession) -> int:
    """Hold the clock row until the transaction ends; returns the newest barrier issued so far (0: none)."""
    value = await session.scalar(select(BarrierClock.last_barrier).where(BarrierClock.id == 1).with_for_update())
    return int(value or 0)


async def head(session: AsyncSession) -> Barrier | None:
    """The newest barrier issued, or None."""
    return await session.scalar(select(Barrier).order_by(Barrier.barrier.desc()).limit(1))


async def get(session: AsyncSession, *, barrier: int) -> Barrier | None:
    return await session.get(Barrier, barrier)


async def after(session: AsyncSession, *, barrier: int) -> int | None:
    """The first barrier issued after `barrier`."""
    return await session.scalar(select(func.min(Barrier.barrier)).where(Barrier.barrier > barrier))


async def before(session: AsyncSession, *, barrier: int) -> int | None:
    """The last barrier issued before `barrier`."""
    return await session.scalar(select(func.max(Barrier.barrier)).where(Barrier.barrier < barrier))


async def newest(session: AsyncSession, *, limit: int, before_barrier: int | None = None) -> list[Barrier]:
    query = select(Barrier).order_by(Barrier.barrier.desc()).limit(limit)
    if before_barrier is not None:
        query = query.where(Barrier.barrier < before_barrier)
    return list(await session.scalars(query))


async def count_between(session: AsyncSession, *, after_barrier: int, through: int) -> int:
    """How many barriers lie in (after_barrier, through]."""
    value = await session.scalar(
        select(func.count()).where(Barrier.barrier > after_barrier, Barrier.barrier <= through)
    )
    return int(value or 0)
