"""Reads for queries: one consistent version for a set of tables."""

from __future__ import annotations

from fastapi import APIRouter

from metaservice.api.deps import DatabaseDep
from metaservice.api.responses import problems
from metaservice.schemas import ConsistentVersions, VersionsRequest
from metaservice.services import versions

router = APIRouter(tags=["versions"])


@router.post("/versions", responses=problems(404, 409))
async def consistent_versions(body: VersionsRequest, db: DatabaseDep) -> ConsistentVersions:
    """One barrier and one snapshot per table (`weak`: the tables; `strong`: their whole lineage components).

    With `min_barrier` or `max_staleness_seconds`, only a version meeting the bound, waiting up to `wait_seconds`
    for one (409 `not_fresh_enough` with the best version's figures when none came)."""
    return await versions.consistent_versions(db, tables=body.tables, consistency=body.consistency, bound=body.bound())
