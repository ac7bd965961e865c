"""Leases and retention: which snapshots must survive vacuum, and why (PRODUCT.md guarantee 7).

A lease belongs to the token that created it: only that token or an admin may renew or release it, and
`GET /leases` lists an admin every live lease and anyone else their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import Forbidden, NotFound
from metaservice.repositories import leases as lease_rows
from metaservice.repositories import rollbacks as rollback_rows
from metaservice.repositories import runs as run_rows
from metaservice.repositories import tables as table_rows
from metaservice.repositories.leases import LeaseRow
from metaservice.schemas import LeaseInfo, LeaseList, ProtectedSnapshot, Retention
from metaservice.services import versions
from metaservice.services.tokens import ANONYMOUS_ADMIN, Principal

# Ended leases protect nothing; they are kept this long for inspection, then deleted when a new lease is made.
ENDED_LEASES_KEPT = timedelta(days=1)


def _owner(principal: Principal) -> str | None:
    return None if principal is ANONYMOUS_ADMIN else principal.name


def _info(lease: LeaseRow, snapshots: Mapping[str, int]) -> LeaseInfo:
    return LeaseInfo(
        lease_id=lease.id,
        holder=lease.holder,
        owner=lease.owner,
        expires_at=lease.expires_at,
        snapshots=dict(snapshots),
    )


def _gone(lease_id: str) -> NotFound:
    return NotFound(f"lease {lease_id!r} does not exist, expired or was released", lease_id=lease_id)


def _check_owner(lease: LeaseRow, principal: Principal, verb: str) -> None:
    if principal.role != "admin" and lease.owner != principal.name:
        raise Forbidden(
            f"token {principal.name!r} may not {verb} lease {lease.id!r}: it belongs to {lease.owner or 'an admin'!r}",
            lease_id=lease.id,
        )


async def create_lease(
    db: Database,
    *,
    holder: str,
    snapshots: Mapping[str, int],
    ttl_seconds: float,
    principal: Principal = ANONYMOUS_ADMIN,
) -> LeaseInfo:
    """Protect the named snapshots until the lease expires or is released."""

    async def work(conn: Connection) -> LeaseInfo:
        tables = await table_rows.get_many(conn, names=list(snapshots))
        missing = sorted(set(snapshots) - set(tables))
        if missing:
            raise NotFound(f"tables not registered: {', '.join(missing)}", tables=missing)
        await lease_rows.purge_ended(conn, older_than=ENDED_LEASES_KEPT)
        lease = await lease_rows.insert(
            conn,
            lease_id=str(uuid.uuid4()),
            holder=holder,
            owner=_owner(principal),
            ttl_seconds=ttl_seconds,
            snapshots={tables[name].id: snap for name, snap in snapshots.items()},
        )
        return _info(lease, snapshots)

    return await in_transaction(db, work)


async def get_lease(db: Database, *, lease_id: str) -> LeaseInfo:
    async def work(conn: Connection) -> LeaseInfo:
        lease = await lease_rows.get_live(conn, lease_id=lease_id)
        if lease is None:
            raise _gone(lease_id)
        return _info(lease, (await lease_rows.snapshots_of(conn, lease_ids=[lease_id]))[lease_id])

    return await in_transaction(db, work, read_only=True)


async def list_leases(db: Database, *, principal: Principal, limit: int) -> LeaseList:
    """Live leases: every one for admins, the caller's own for anyone else."""

    async def work(conn: Connection) -> LeaseList:
        owner = None if principal.role == "admin" else principal.name
        leases = await lease_rows.list_live(conn, owner=owner, limit=limit)
        held = await lease_rows.snapshots_of(conn, lease_ids=[lease.id for lease in leases])
        return LeaseList(leases=[_info(lease, held[lease.id]) for lease in leases])

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


async def renew_lease(
    db: Database, *, lease_id: str, ttl_seconds: float | None, principal: Principal = ANONYMOUS_ADMIN
) -> LeaseInfo:
    """Extend a live lease to now + ttl (default: the ttl it was created with)."""

    async def work(conn: Connection) -> LeaseInfo:
        lease = await lease_rows.get_live(conn, lease_id=lease_id)
        if lease is None:
            raise _gone(lease_id)
        _check_owner(lease, principal, "renew")
        ttl = ttl_seconds if ttl_seconds is not None else lease.ttl_seconds
        renewed = await lease_rows.renew(conn, lease_id=lease_id, ttl_seconds=ttl)
        if renewed is None:
            raise _gone(lease_id)
        return _info(renewed, (await lease_rows.snapshots_of(conn, lease_ids=[lease_id]))[lease_id])

    return await in_transaction(db, work)


async def release_lease(db: Database, *, lease_id: str, principal: Principal = ANONYMOUS_ADMIN) -> None:
    async def work(conn: Connection) -> None:
        lease = await lease_rows.get_live(conn, lease_id=lease_id)
        if lease is None:
            raise _gone(lease_id)
        _check_owner(lease, principal, "release")
        if await lease_rows.release(conn, lease_id=lease_id) is None:
            raise _gone(lease_id)

    await in_transaction(db, work)


async def retention(db: Database, *, table: str) -> Retention:
    """Snapshots of `table` that must be kept: in-flight inputs, live leases, the strong version, the newest."""

    async def work(conn: Connection) -> Retention:
        row = await table_rows.get(conn, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        protected: list[ProtectedSnapshot] = []
        for job, barrier, entry in await run_rows.in_flight_reading(conn, table=table):
            for key in ("snapshot_id", "previous_snapshot_id"):
                if entry.get(key) is not None:
                    protected.append(
                        ProtectedSnapshot(snapshot_id=int(entry[key]), reason=f"in_flight:{job}@{barrier}:{key}")
                    )
        for snapshot, holder in await lease_rows.live_for_table(conn, table_id=row.id):
            protected.append(ProtectedSnapshot(snapshot_id=snapshot, reason=f"lease:{holder}"))
        for rollback_id, snapshot in await rollback_rows.planned_restores(conn, table=table):
            protected.append(ProtectedSnapshot(snapshot_id=snapshot, reason=f"rollback:{rollback_id}"))
        strong = await versions.snapshot_at_strong(conn, table_id=row.id)
        if strong is not None:
            protected.append(ProtectedSnapshot(snapshot_id=strong[1], reason=f"strong_version@{strong[0]}"))
        if row.latest_snapshot_id is not None:
            protected.append(ProtectedSnapshot(snapshot_id=row.latest_snapshot_id, reason="newest"))
        protected.sort(key=lambda p: (p.snapshot_id, p.reason))
        oldest = protected[0].snapshot_id if protected else None
        return Retention(table=table, oldest_protected_snapshot_id=oldest, protected=protected)

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)
