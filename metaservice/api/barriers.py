"""The barrier protocol: next / commit / abort for jobs, issuing barriers, root snapshot reports."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Header, Request, status

from metaservice.api.auth import PrincipalDep
from metaservice.api.deps import (
    BarrierPath,
    BeforeBarrier,
    CatalogPath,
    DatabaseDep,
    DatabasePath,
    JobIdPath,
    Limit,
    OpenLineageParentDep,
    RuntimeDep,
    SettingsDep,
    TablePath,
    openlineage_parent,
    table_name,
)
from metaservice.api.responses import problems
from metaservice.schemas import (
    AbortRequest,
    AbortResult,
    BarrierDecision,
    BarrierDetail,
    BarrierList,
    CommitRequest,
    CommitResult,
    IssueBarrierRequest,
    IssuedBarrier,
    NextBarrierRequest,
    SnapshotReport,
    SnapshotReportRequest,
)
from metaservice.services import barriers as barrier_service
from metaservice.services import inspection

router = APIRouter(tags=["barriers"])


# `next` ends no run: its X-OpenLineage-Parent is only checked, so that a malformed one fails before any work.
@router.post("/jobs/{job_id}/barriers/next", responses=problems(404, 409), dependencies=[Depends(openlineage_parent)])
async def next_barrier(
    job_id: JobIdPath,
    request: Request,
    rt: RuntimeDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    body: Annotated[NextBarrierRequest | None, Body()] = None,
) -> BarrierDecision:
    """Tell a job which barrier to process now, or that it must wait or is idle. Retried calls get the same answer."""
    decision = await barrier_service.next_barrier(
        rt,
        job_id=job_id,
        root_snapshots=body.root_snapshots if body else {},
        min_interval=settings.min_barrier_interval,
        start=body.start if body else None,
        principal=principal,
    )
    request.app.state.http_metrics.answered_next(decision.action)
    return decision


@router.post("/jobs/{job_id}/barriers/{barrier}/commit", responses=problems(404, 409))
async def commit_barrier(
    job_id: JobIdPath, barrier: BarrierPath, body: CommitRequest, rt: RuntimeDep, parent: OpenLineageParentDep
) -> CommitResult:
    """Record the job's sink snapshots for the barrier; the same commit again is a no-op."""
    return await barrier_service.commit_barrier(
        rt, job_id=job_id, barrier=barrier, snapshots=body.snapshots, parent=parent
    )


@router.post("/jobs/{job_id}/barriers/{barrier}/abort", responses=problems(404, 409))
async def abort_barrier(
    job_id: JobIdPath,
    barrier: BarrierPath,
    rt: RuntimeDep,
    parent: OpenLineageParentDep,
    body: Annotated[AbortRequest | None, Body()] = None,
) -> AbortResult:
    """Give up the barrier: it never completes in the job's sinks and downstream jobs skip it."""
    return await barrier_service.abort_barrier(
        rt, job_id=job_id, barrier=barrier, reason=body.reason if body else None, parent=parent
    )


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="Any unique string (a UUID) per call; repeating the call with the same key returns the first "
        "call's barrier instead of issuing another, so a call whose answer was lost can be retried safely.",
    ),
]


@router.post("/barriers", status_code=status.HTTP_201_CREATED, responses=problems(404, 409))
async def issue_barrier(
    rt: RuntimeDep,
    body: Annotated[IssueBarrierRequest | None, Body()] = None,
    idempotency_key: IdempotencyKey = None,
) -> IssuedBarrier:
    """Issue a global barrier now, sealing the newest snapshot of every root table.

    Not idempotent unless an `Idempotency-Key` is sent: then a repeat returns the same answer."""
    return await barrier_service.issue_barrier(
        rt, root_snapshots=body.root_snapshots if body else {}, request_key=idempotency_key
    )


@router.get("/barriers", responses=problems())
async def list_barriers(
    db: DatabaseDep, rt: RuntimeDep, limit: Limit = 100, before: BeforeBarrier = None
) -> BarrierList:
    """Barriers, newest first."""
    listed = await inspection.list_barriers(db, limit=limit, before=before)
    if listed.barriers:  # handed out: never issued again (repositories/allocator.py)
        rt.allocator.handed(listed.barriers[0].barrier)
    return listed


@router.get("/barriers/{barrier}", responses=problems(404))
async def get_barrier(barrier: BarrierPath, db: DatabaseDep, rt: RuntimeDep) -> BarrierDetail:
    """One barrier with the state of every table at it."""
    detail = await inspection.get_barrier(db, barrier=barrier)
    rt.allocator.handed(detail.barrier)
    return detail


@router.post("/tables/{catalog}/{database}/{table}/snapshots", responses=problems(404, 409))
async def report_snapshot(
    catalog: CatalogPath,
    database: DatabasePath,
    table: TablePath,
    body: SnapshotReportRequest,
    rt: RuntimeDep,
) -> SnapshotReport:
    """An external writer reports a new snapshot of a root table; the next barrier seals it."""
    name = table_name(catalog, database, table)
    latest = await barrier_service.report_snapshot(
        rt, table=name, snapshot_id=body.snapshot_id, committed_at=body.committed_at
    )
    return SnapshotReport(table=name, latest_snapshot_id=latest)
