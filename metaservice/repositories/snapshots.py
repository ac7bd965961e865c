"""SQL for snapshot ranges: which snapshot each table holds for which barriers."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY, BIGINT
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import SnapshotRange

# One round trip each: the ranges come back as whole rows, loaded as ORM objects (`from_statement`).
_COVERING = text(
    """
    SELECT r.*
      FROM unnest(:table_ids) AS t(table_id)
      JOIN LATERAL (
            SELECT s.* FROM snapshot_ranges s
             WHERE s.table_id = t.table_id AND s.first_barrier <= :barrier
             ORDER BY s.first_barrier DESC LIMIT 1) r ON true
     WHERE r.last_barrier IS NULL OR r.last_barrier >= :barrier
    """
).bindparams(bindparam("table_ids", type_=ARRAY(BIGINT)))

_LAST = text(
    """
    SELECT r.*
      FROM unnest(:table_ids) AS t(table_id)
      JOIN LATERAL (
            SELECT s.* FROM snapshot_ranges s WHERE s.table_id = t.table_id
             ORDER BY s.first_barrier DESC LIMIT 1) r ON true
    """
).bindparams(bindparam("table_ids", type_=ARRAY(BIGINT)))


async def covering(session: AsyncSession, *, table_ids: Sequence[int], barrier: int) -> dict[int, SnapshotRange]:
    """For each table, the range that holds at `barrier`; tables without one are left out."""
    statement = select(SnapshotRange).from_statement(_COVERING)
    rows = await session.scalars(statement, {"table_ids": list(table_ids), "barrier": barrier})
    return {row.table_id: row for row in rows}


async def last(session: AsyncSession, *, table_ids: Sequence[int]) -> dict[int, SnapshotRange]:
    """For each table, its newest range; tables that never held a snapshot are left out."""
    rows = await session.scalars(select(SnapshotRange).from_statement(_LAST), {"table_ids": list(table_ids)})
    return {row.table_id: row for row in rows}


async def last_snapshot(session: AsyncSession, *, table_id: int) -> int | None:
    """The newest snapshot id the table completed any barrier with."""
    return await session.scalar(
        select(SnapshotRange.snapshot_id)
        .where(SnapshotRange.table_id == table_id, SnapshotRange.snapshot_id.is_not(None))
        .order_by(SnapshotRange.first_barrier.desc())
        .limit(1)
    )


async def previous(session: AsyncSession, *, table_id: int, before_first: int) -> SnapshotRange | None:
    """The range right before the one starting at `before_first`."""
    return await session.scalar(
        select(SnapshotRange)
        .where(SnapshotRange.table_id == table_id, SnapshotRange.first_barrier < before_first)
        .order_by(SnapshotRange.first_barrier.desc())
        .limit(1)
    )


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
    session.add(
        SnapshotRange(
            table_id=table_id,
            first_barrier=first,
            last_barrier=last,
            snapshot_id=snapshot_id,
            kind=kind,
            job_id=job_id,
        )
    )
    await session.flush()


async def extend(session: AsyncSession, *, range_id: int, through: int | None) -> None:
    """Let a range hold through a later barrier (or, with None, open-ended)."""
    await session.execute(
        update(SnapshotRange)
        .where(SnapshotRange.id == range_id)
        .values(last_barrier=through, updated_at=func.now())
        .execution_options(synchronize_session=False)
    )


async def close_open(session: AsyncSession, *, table_id: int, through: int) -> None:
    """Close the table's open-ended range at `through` (a root table that gets a writer)."""
    await session.execute(
        update(SnapshotRange)
        .where(SnapshotRange.table_id == table_id, SnapshotRange.last_barrier.is_(None))
        .values(last_barrier=through, updated_at=func.now())
        .execution_options(synchronize_session=False)
    )


async def history(
    session: AsyncSession, *, table_id: int, limit: int, before_barrier: int | None = None
) -> list[SnapshotRange]:
    query = (
        select(SnapshotRange)
        .where(SnapshotRange.table_id == table_id)
        .order_by(SnapshotRange.first_barrier.desc())
        .limit(limit)
    )
    if before_barrier is not None:
        query = query.where(SnapshotRange.first_barrier < before_barrier)
    return list(await session.scalars(query))
