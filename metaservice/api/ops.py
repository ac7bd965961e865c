"""Operations: liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter

from metaservice.api.deps import DatabaseDep
from metaservice.api.responses import problems
from metaservice.services import health

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (does not touch the database)."""
    return {"status": "ok"}


@router.get("/readyz", responses=problems())
async def readyz(db: DatabaseDep) -> dict[str, str]:
    """The database is reachable and migrated to this code's schema."""
    return await health.readiness(db)
