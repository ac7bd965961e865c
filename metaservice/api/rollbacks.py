"""Rollback: plan restoring a table and its downstream to a barrier, then forget what came after it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, status

from metaservice.api.deps import DatabaseDep
from metaservice.api.responses import problems
from metaservice.schemas import CompleteRollbackRequest, Rollback, RollbackRequest
from metaservice.services import rollback

router = APIRouter(tags=["rollback"])

RollbackId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9a-fA-F-]+$")]


@router.post("/rollbacks", status_code=status.HTTP_201_CREATED, responses=problems(404, 409))
async def plan_rollback(body: RollbackRequest, db: DatabaseDep) -> Rollback:
    """Plan a rollback of the table and everything downstream of it to `barrier`.

    Each table gets the snapshot to restore in storage (its snapshot at the barrier), each job that recomputes
    them the barrier it resumes after. 409 `rollback_conflict` names the tables with no snapshot at the barrier.
    While planned, the restore snapshots are reported as protected by `GET /tables/…/retention`.
    """
    return await rollback.plan_rollback(db, table=body.table, barrier=body.barrier)


@router.get("/rollbacks/{rollback_id}", responses=problems(404))
async def get_rollback(rollback_id: RollbackId, db: DatabaseDep) -> Rollback:
    """A rollback plan and its status."""
    return await rollback.get_rollback(db, rollback_id=rollback_id)


@router.post("/rollbacks/{rollback_id}/complete", responses=problems(404, 409))
async def complete_rollback(
    rollback_id: RollbackId,
    db: DatabaseDep,
    body: Annotated[CompleteRollbackRequest | None, Body()] = None,
) -> Rollback:
    """Call after storage was restored: forget the completions after the barrier and rewind the jobs to it.

    In-flight barriers of the affected jobs are aborted (their commits get 409 `not_in_flight`); the jobs then
    recompute the barriers after it. Consistent versions, strong included, may go back to the barrier until
    they have. A rolled-back root table holds its restore snapshot after the barrier; its corrected data enters
    through a new snapshot report. Completing again returns the same body. 409 `rollback_stale` when the lineage
    or the snapshots at the barrier changed since planning (plan again), `rollback_not_planned` when cancelled.
    """
    return await rollback.complete_rollback(
        db, rollback_id=rollback_id, root_snapshots=body.root_snapshots if body else {}
    )


@router.post("/rollbacks/{rollback_id}/cancel", responses=problems(404, 409))
async def cancel_rollback(rollback_id: RollbackId, db: DatabaseDep) -> Rollback:
    """Drop a planned rollback; cancelling again is a no-op, a completed one gives 409 `rollback_not_planned`."""
    return await rollback.cancel_rollback(db, rollback_id=rollback_id)
