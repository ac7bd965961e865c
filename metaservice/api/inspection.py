"""Inspection for admins: jobs and tables with their histories."""

from __future__ import annotations

from fastapi import APIRouter

from metaservice.api.deps import (
    AfterName,
    BeforeBarrier,
    CatalogPath,
    DatabaseDep,
    DatabasePath,
    JobIdPath,
    Limit,
    TablePath,
    table_name,
)
from metaservice.api.responses import problems
from metaservice.schemas import JobHistory, JobInfo, JobList, TableHistory, TableInfo, TableList
from metaservice.services import inspection

router = APIRouter(tags=["inspection"])


@router.get("/jobs", responses=problems())
async def list_jobs(db: DatabaseDep, limit: Limit = 100, after: AfterName = None) -> JobList:
    """Jobs by name (page with `after`)."""
    return await inspection.list_jobs(db, limit=limit, after=after)


@router.get("/jobs/{job_id}", responses=problems(404))
async def get_job(job_id: JobIdPath, db: DatabaseDep) -> JobInfo:
    """Sources, sinks, last barrier, barrier in flight, last seen."""
    return await inspection.get_job(db, job_id=job_id)


@router.get("/jobs/{job_id}/barriers", responses=problems(404))
async def job_history(
    job_id: JobIdPath, db: DatabaseDep, limit: Limit = 100, before: BeforeBarrier = None
) -> JobHistory:
    """The job's barrier history, newest first; idle and skipped stretches are one entry each."""
    return await inspection.job_history(db, job_id=job_id, limit=limit, before=before)


@router.get("/tables", responses=problems())
async def list_tables(db: DatabaseDep, limit: Limit = 100, after: AfterName = None) -> TableList:
    """Tables by name (page with `after`)."""
    return await inspection.list_tables(db, limit=limit, after=after)


@router.get("/tables/{catalog}/{database}/{table}", responses=problems(404))
async def get_table(catalog: CatalogPath, database: DatabasePath, table: TablePath, db: DatabaseDep) -> TableInfo:
    """Kind, writer, readers, format, location, newest complete barrier and snapshot."""
    return await inspection.get_table(db, table=table_name(catalog, database, table))


@router.get("/tables/{catalog}/{database}/{table}/barriers", responses=problems(404))
async def table_history(
    catalog: CatalogPath,
    database: DatabasePath,
    table: TablePath,
    db: DatabaseDep,
    limit: Limit = 100,
    before: BeforeBarrier = None,
) -> TableHistory:
    """Which snapshot the table holds for which barriers, and how it completed them, newest first."""
    return await inspection.table_history(db, table=table_name(catalog, database, table), limit=limit, before=before)
