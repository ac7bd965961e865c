"""FLIP-276 endpoints with the paths kept verbatim: register, version, unregister."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Response, status

from metaservice.api.auth import PrincipalDep
from metaservice.api.deps import CatalogPath, DatabaseDep, DatabasePath, JobIdPath, RuntimeDep, TablePath, table_name
from metaservice.api.responses import problems
from metaservice.schemas import (
    EdgeRemoval,
    FreshnessQuery,
    JobRegistration,
    RegisterJobRequest,
    RegisterRequest,
    Registration,
    TableVersion,
    Unregistration,
)
from metaservice.services import registry, versions
from metaservice.services.tokens import Principal

router = APIRouter(tags=["FLIP-276"])

OptionalRegisterBody = Annotated[RegisterRequest | None, Body()]


REGISTERED: dict[int | str, dict[str, Any]] = {200: {"model": Registration, "description": "Edge already registered"}}


async def _register(
    role: Literal["source", "sink"],
    job_id: str,
    table: str,
    body: RegisterRequest | None,
    db: DatabaseDep,
    response: Response,
    principal: Principal,
) -> Registration:
    result = await registry.register(
        db,
        job_id=job_id,
        table=table,
        role=role,
        format=body.format if body else None,
        location=body.location if body else None,
        principal=principal,
    )
    response.status_code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
    return result


@router.post(
    "/register/source/{job_id}/{catalog}/{database}/{table}",
    status_code=status.HTTP_201_CREATED,
    responses={**REGISTERED, **problems(409)},
)
async def register_source(
    job_id: JobIdPath,
    catalog: CatalogPath,
    database: DatabasePath,
    table: TablePath,
    db: DatabaseDep,
    response: Response,
    principal: PrincipalDep,
    body: OptionalRegisterBody = None,
) -> Registration:
    """Declare that the job reads the table (201 new edge, 200 already there; 409 `cycle`).

    A job with a barrier in flight gets it aborted: it was planned on the old lineage."""
    return await _register("source", job_id, table_name(catalog, database, table), body, db, response, principal)


@router.post(
    "/register/sink/{job_id}/{catalog}/{database}/{table}",
    status_code=status.HTTP_201_CREATED,
    responses={**REGISTERED, **problems(409)},
)
async def register_sink(
    job_id: JobIdPath,
    catalog: CatalogPath,
    database: DatabasePath,
    table: TablePath,
    db: DatabaseDep,
    response: Response,
    principal: PrincipalDep,
    body: OptionalRegisterBody = None,
) -> Registration:
    """Declare that the job writes the table (409 `table_has_writer` with `writer`, 409 `cycle`,
    409 `table_name_conflict` for a case variant of a registered name, 403 outside a job token's namespaces).

    A job with a barrier in flight gets it aborted: it was planned on the old lineage."""
    return await _register("sink", job_id, table_name(catalog, database, table), body, db, response, principal)


@router.post(
    "/register/{job_id}",
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": JobRegistration, "description": "Every edge already registered"}, **problems(409)},
)
async def register_job(
    job_id: JobIdPath, body: RegisterJobRequest, db: DatabaseDep, response: Response, principal: PrincipalDep
) -> JobRegistration:
    """Register a job's sources and sinks in one transaction: all of them or, on any 4xx, none (201 when an edge
    was new, 200 when all were there; 409 `unknown_source` for a source MetaService does not know and that
    `new_roots` does not declare, and the 409s of the per-edge endpoints)."""
    result = await registry.register_job(db, job_id=job_id, request=body, principal=principal)
    response.status_code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
    return result


@router.delete("/register/source/{job_id}/{catalog}/{database}/{table}", responses=problems(404))
async def remove_source(
    job_id: JobIdPath, catalog: CatalogPath, database: DatabasePath, table: TablePath, db: DatabaseDep
) -> EdgeRemoval:
    """The job stops reading the table (`removed: false` when it did not). Its next barrier is processed."""
    name = table_name(catalog, database, table)
    return await registry.remove_edge(db, job_id=job_id, table=name, role="source")


@router.delete("/register/sink/{job_id}/{catalog}/{database}/{table}", responses=problems(404))
async def remove_sink(
    job_id: JobIdPath, catalog: CatalogPath, database: DatabasePath, table: TablePath, db: DatabaseDep
) -> EdgeRemoval:
    """The job stops writing the table, which keeps its history and settles no newer barrier until a new writer
    or an external snapshot report (an orphan)."""
    name = table_name(catalog, database, table)
    return await registry.remove_edge(db, job_id=job_id, table=name, role="sink")


@router.get("/version/{consistency_type}/{catalog}/{database}/{table}", responses=problems(404, 409))
async def table_version(
    consistency_type: Annotated[Literal["strong", "weak"], Path()],
    catalog: CatalogPath,
    database: DatabasePath,
    table: TablePath,
    rt: RuntimeDep,
    bound: Annotated[FreshnessQuery, Query()],
) -> TableVersion:
    """The snapshot of one table to read now (404 `no_consistent_version` before its first completion); with
    `min_barrier` or `max_staleness_seconds`, one meeting the bound (waiting up to `wait_seconds`; else 409)."""
    name = table_name(catalog, database, table)
    result = await versions.consistent_versions(rt, tables=[name], consistency=consistency_type, bound=bound)
    return TableVersion(
        table=name, consistency=consistency_type, barrier=result.barrier, snapshot_id=result.versions[name]
    )


@router.post("/unregister/{job_id}", responses=problems(404))
async def unregister(job_id: JobIdPath, db: DatabaseDep) -> Unregistration:
    """The job terminated: drop its edges and writer claims; its barrier history stays."""
    return await registry.unregister(db, job_id=job_id)
