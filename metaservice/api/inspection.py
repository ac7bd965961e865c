"""Inspection for admins: jobs and tables with their histories."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

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
from metaservice.schemas import (
    JOB_PATTERN,
    JobHistory,
    JobInfo,
    JobList,
    RootGroup,
    RootGroupList,
    RootGroupRequest,
    TableHistory,
    TableInfo,
    TableList,
    TableRetirement,
)
from metaservice.services import inspection, registry

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
async def list_tables(
    db: DatabaseDep, limit: Limit = 100, after: AfterName = None, include_retired: bool = False
) -> TableList:
    """Tables by name (page with `after`); retired tables only with `include_retired=true`."""
    return await inspection.list_tables(db, limit=limit, after=after, include_retired=include_retired)


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


@router.post("/tables/{catalog}/{database}/{table}/retire", responses=problems(404, 409))
async def retire_table(
    catalog: CatalogPath, database: DatabasePath, table: TablePath, db: DatabaseDep
) -> TableRetirement:
    """Retire a table no job reads or writes (admins; 409 `table_in_use` naming the jobs): it leaves the lists,
    delays and lineage, reads naming it answer 404, registrations and reports naming it 409 `table_retired`."""
    return await registry.retire_table(db, table=table_name(catalog, database, table))


@router.post("/tables/{catalog}/{database}/{table}/revive", responses=problems(404))
async def revive_table(
    catalog: CatalogPath, database: DatabasePath, table: TablePath, db: DatabaseDep
) -> TableRetirement:
    """Undo a retirement (admins): the table is listed, readable and can be registered again."""
    return await registry.revive_table(db, table=table_name(catalog, database, table))


RootGroupName = Annotated[str, Path(pattern=JOB_PATTERN, max_length=200, description="the group's name")]


@router.put("/root-groups/{group}", responses=problems(409))
async def set_root_group(group: RootGroupName, body: RootGroupRequest, db: DatabaseDep) -> RootGroup:
    """Declare the roots one ingestion writes together (admins): barriers seal all of them or none. A job's `next`
    report of one of them records nothing; `POST /barriers` names them all (else 409 `partial_root_group`)."""
    return await registry.set_root_group(db, group=group, tables=body.tables)


@router.get("/root-groups", responses=problems())
async def list_root_groups(db: DatabaseDep) -> RootGroupList:
    """Every root group with its tables."""
    return await registry.root_groups(db)
