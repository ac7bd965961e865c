"""SQL for leases. Expiry is judged by the database clock, the same for every server process."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import Lease, LeaseSnapshot, Table


async def insert(
    session: AsyncSession, *, lease_id: str, holder: str, ttl_seconds: float, snapshots: Mapping[int, int]
) -> Lease:
    lease = Lease(
        id=lease_id,
        holder=holder,
        ttl_seconds=ttl_seconds,
        created_at=func.now(),
        expires_at=func.now() + timedelta(seconds=ttl_seconds),
    )
    session.add(lease)
    session.add_all(LeaseSnapshot(lease_id=lease_id, table_id=t, snapshot_id=s) for t, s in snapshots.items())
    await session.flush()
    await session.refresh(lease)
    return lease


async def get_live(session: AsyncSession, *, lease_id: str) -> Lease | None:
    return await session.scalar(
        select(Lease).where(Lease.id == lease_id, Lease.released_at.is_(None), Lease.expires_at > func.now())
    )


async def snapshots_of(session: AsyncSession, *, lease_id: str) -> dict[str, int]:
    rows = await session.execute(
        select(Table.name, LeaseSnapshot.snapshot_id)
        .join(Table, Table.id == LeaseSnapshot.table_id)
        .where(LeaseSnapshot.lease_id == lease_id)
    )
    return {str(r[0]): int(r[1]) for r in rows}


async def renew(session: AsyncSession, *, lease_id: str, ttl_seconds: float) -> Lease | None:
    """Push a live lease's expiry to now + ttl (its own `ttl_seconds` stays the one it was created with)."""
    return await session.scalar(
        update(Lease)
        .where(Lease.id == lease_id, Lease.released_at.is_(None), Lease.expires_at > func.now())
        .values(expires_at=func.now() + timedelta(seconds=ttl_seconds))
        .returning(Lease),
        execution_options={"populate_existing": True},
    )


async def release(session: AsyncSession, *, lease_id: str) -> bool:
    """End a live lease; False when it was already gone."""
    result = await session.execute(
        update(Lease)
        .where(Lease.id == lease_id, Lease.released_at.is_(None), Lease.expires_at > func.now())
        .values(released_at=func.now())
        .returning(Lease.id)
    )
    return result.first() is not None


async def live_for_table(session: AsyncSession, *, table_id: int) -> list[tuple[int, str]]:
    """(snapshot id, holder) of every live lease on the table."""
    rows = await session.execute(
        select(LeaseSnapshot.snapshot_id, Lease.holder)
        .join(Lease, Lease.id == LeaseSnapshot.lease_id)
        .where(LeaseSnapshot.table_id == table_id, Lease.released_at.is_(None), Lease.expires_at > func.now())
    )
    return [(int(r[0]), str(r[1])) for r in rows]


async def purge_ended(session: AsyncSession, *, older_than: timedelta) -> int:
    """Delete leases that ended more than `older_than` ago (they protect nothing)."""
    cutoff = func.now() - older_than
    result = await session.execute(
        delete(Lease).where((Lease.expires_at < cutoff) | (Lease.released_at < cutoff)).returning(Lease.id)
    )
    return len(result.all())
