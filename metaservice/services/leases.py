"""Leases and retention: which snapshots must survive vacuum, and why (PRODUCT.md guarantee 7)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.transaction import in_transaction
from metaservice.errors import NotFound
from metaservice.repositories import leases as lease_rows
from metaservice.repositories import rollbacks as rollback_rows
from metaservice.repositories import runs as run_rows
from metaservice.repositories import tables as table_rows
from metaservice.schemas import LeaseInfo, ProtectedSnapshot, Retention
from metaservice.services import versions

# Ended leases protect nothing; they are kept this long for inspection, then deleted when a new lease is made.
ENDED_LEASES_KEPT = timedelta(days=1)


async def create_lease(
    session: AsyncSession, *, holder: str, snapshots: Mapping[str, int], ttl_seconds: float
) -> LeaseInfo:
    """Protect the named snapshots until the lease expires or is released."""

    async def work(s: AsyncSession) -> LeaseInfo:
        tables = await table_rows.get_many(s, names=list(snapshots))
        missing = sorted(set(snapshots) - set(tables))
        if missing:
            raise NotFound(f"tables not registered: {', '.join(missing)}", tables=missing)
        await lease_rows.purge_ended(s, older_than=ENDED_LEASES_KEPT)
        lease = await lease_rows.insert(
            s,
            lease_id=str(uuid.uuid4()),
            holder=holder,
            ttl_seconds=ttl_seconds,
            snapshots={tables[name].id: snap for name, snap in snapshots.items()},
        )
        return LeaseInfo(lease_id=lease.id, holder=holder, expires_at=lease.expires_at, snapshots=dict(snapshots))

    return await in_transaction(session, work)


async def get_lease(session: AsyncSession, *, lease_id: str) -> LeaseInfo:
    async def work(s: AsyncSession) -> LeaseInfo:
        lease = await lease_rows.get_live(s, lease_id=lease_id)
        if lease is None:
            raise NotFound(f"lease {lease_id!r} does not exist, expired or was released", lease_id=lease_id)
        snapshots = await lease_rows.snapshots_of(s, lease_id=lease_id)
        return LeaseInfo(lease_id=lease.id, holder=lease.holder, expires_at=lease.expires_at, snapshots=snapshots)

    return await in_transaction(session, work, read_only=True)


async def renew_lease(session: AsyncSession, *, lease_id: str, ttl_seconds: float | None) -> LeaseInfo:
    """Extend a live lease to now + ttl (default: the ttl it was created with)."""

    async def work(s: AsyncSession) -> LeaseInfo:
        lease = await lease_rows.get_live(s, lease_id=lease_id)
        renewed = None
        if lease is not None:
            ttl = ttl_seconds if ttl_seconds is not None else lease.ttl_seconds
            renewed = await lease_rows.renew(s, lease_id=lease_id, ttl_seconds=ttl)
        if renewed is None:
            raise NotFound(f"lease {lease_id!r} does not exist, expired or was released", lease_id=lease_id)
        snapshots = await lease_rows.snapshots_of(s, lease_id=lease_id)
        return LeaseInfo(lease_id=renewed.id, holder=renewed.holder, expires_at=renewed.expires_at, snapshots=snapshots)

    return await in_transaction(session, work)


async def release_lease(session: AsyncSession, *, lease_id: str) -> None:
    async def work(s: AsyncSession) -> None:
        if not await lease_rows.release(s, lease_id=lease_id):
            raise NotFound(f"lease {lease_id!r} does not exist, expired or was released", lease_id=lease_id)

    await in_transaction(session, work)


async def retention(session: AsyncSession, *, table: str) -> Retention:
    """Snapshots of `table` that must be kept: in-flight inputs, live leases, the strong version, the newest."""

    async def work(s: AsyncSession) -> Retention:
        row = await table_rows.get(s, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        protected: list[ProtectedSnapshot] = []
        for job, barrier, entry in await run_rows.in_flight_reading(s, table=table):
            for key in ("snapshot_id", "previous_snapshot_id"):
                if entry.get(key) is not None:
                    protected.append(
                        ProtectedSnapshot(snapshot_id=int(entry[key]), reason=f"in_flight:{job}@{barrier}:{key}")
                    )
        for snapshot, holder in await lease_rows.live_for_table(s, table_id=row.id):
            protected.append(ProtectedSnapshot(snapshot_id=snapshot, reason=f"lease:{holder}"))
        for rollback_id, snapshot in await rollback_rows.planned_restores(s, table=table):
            protected.append(ProtectedSnapshot(snapshot_id=snapshot, reason=f"rollback:{rollback_id}"))
        strong = await versions.snapshot_at_strong(s, table_id=row.id)
        if strong is not None:
            protected.append(ProtectedSnapshot(snapshot_id=strong[1], reason=f"strong_version@{strong[0]}"))
        if row.latest_snapshot_id is not None:
            protected.append(ProtectedSnapshot(snapshot_id=row.latest_snapshot_id, reason="newest"))
        protected.sort(key=lambda p: (p.snapshot_id, p.reason))
        oldest = protected[0].snapshot_id if protected else None
        return Retention(table=table, oldest_protected_snapshot_id=oldest, protected=protected)

    return await in_transaction(session, work, isolation="REPEATABLE READ", read_only=True)
