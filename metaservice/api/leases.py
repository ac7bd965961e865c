"""Retention and leases: readers protect snapshots; vacuum asks what must be kept."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response, status

from metaservice.api.auth import PrincipalDep
from metaservice.api.deps import CatalogPath, DatabaseDep, DatabasePath, Limit, TablePath, table_name
from metaservice.api.responses import problems
from metaservice.schemas import LeaseInfo, LeaseList, LeaseRequest, RenewLeaseRequest, Retention
from metaservice.services import leases

router = APIRouter(tags=["retention"])

LeaseId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9a-fA-F-]+$")]


@router.post("/leases", status_code=status.HTTP_201_CREATED, responses=problems(404))
async def create_lease(body: LeaseRequest, db: DatabaseDep, principal: PrincipalDep) -> LeaseInfo:
    """Hold snapshots for `ttl_seconds`: they are reported as protected until the lease ends. The lease belongs
    to the calling token: only it (or an admin) may renew or release it."""
    return await leases.create_lease(
        db, holder=body.holder, snapshots=body.snapshots, ttl_seconds=body.ttl_seconds, principal=principal
    )


@router.get("/leases", responses=problems())
async def list_leases(db: DatabaseDep, principal: PrincipalDep, limit: Limit = 100) -> LeaseList:
    """Live leases, soonest to expire first: every one for admins, the caller's own for other tokens."""
    return await leases.list_leases(db, principal=principal, limit=limit)


@router.get("/leases/{lease_id}", responses=problems(404))
async def get_lease(lease_id: LeaseId, db: DatabaseDep) -> LeaseInfo:
    """A live lease (404 once expired or released)."""
    return await leases.get_lease(db, lease_id=lease_id)


@router.post("/leases/{lease_id}/renew", responses=problems(404))
async def renew_lease(
    lease_id: LeaseId,
    db: DatabaseDep,
    principal: PrincipalDep,
    body: Annotated[RenewLeaseRequest | None, Body()] = None,
) -> LeaseInfo:
    """Extend a live lease to now + ttl (default: the ttl it was created with); 404 once expired or released,
    403 for a token that did not create it."""
    ttl = body.ttl_seconds if body else None
    return await leases.renew_lease(db, lease_id=lease_id, ttl_seconds=ttl, principal=principal)


@router.delete("/leases/{lease_id}", status_code=status.HTTP_204_NO_CONTENT, responses=problems(403, 404))
async def release_lease(lease_id: LeaseId, db: DatabaseDep, principal: PrincipalDep) -> Response:
    """End a lease now (its creator or an admin; 403 otherwise)."""
    await leases.release_lease(db, lease_id=lease_id, principal=principal)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/tables/{catalog}/{database}/{table}/retention", responses=problems(404))
async def retention(catalog: CatalogPath, database: DatabasePath, table: TablePath, db: DatabaseDep) -> Retention:
    """Snapshots that must be kept, and why; vacuum keeps every snapshot at or above `oldest_protected_snapshot_id`.

    Reasons: `in_flight:<job>@<barrier>:snapshot_id|previous_snapshot_id` (inputs of a barrier in flight),
    `lease:<holder>` (live leases), `rollback:<id>` (restore snapshots of planned rollbacks),
    `strong_version@<barrier>` (the table's current strong version) and `newest` (its newest known snapshot).
    """
    return await leases.retention(db, table=table_name(catalog, database, table))
