"""FLIP-276 endpoints with the paths kept verbatim: register, version, unregister."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Response, status

from metaservice.api.deps import CatalogPath, DatabasePath, JobIdPath, SessionDep, TablePath, table_name
from metaservice.api.responses import problems
from metaservice.schemas import RegisterRequest, Registration, TableVersion, Unregistration
from metaservice.services import registry, versions

router = APIRouter(tags=["FLIP-276"])

OptionalRegisterBody = Annotated[RegisterRequest | None, Body()]


REGISTERED: dict[int | str, dict[str, Any]] = {200: {"model": Registration, "description": "Edge already registered"}}


async def _register(
    role: Literal["source", "sink"],
    job_id: str,
    table: str,
    body: RegisterRequest | None,
    session: SessionDep,
    response: Response,
) -> Registration:
    result = await registry.register(
        session,
        job_id=job_id,
        table=table,
        role=role,
        format=body.format if body else None,
        location=body.location if body else None,
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
    session: SessionDep,
    response: Response,
    body: OptionalRegisterBody = None,
) -> Registration:
    """Declare that the job reads the table (201 new edge, 200 already there; 409 `cycle`)."""
    return await _register("source", job_id, table_name(catalog, database, table), body, session, response)


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
    session: SessionDep,
    response: Response,
    body: OptionalRegisterBody = None,
) -> Registration:
    """Declare that the job writes the table (409 `table_has_writer` with `writer`, 409 `cycle`)."""
    return await _register("sink", job_id, table_name(catalog, database, table), body, session, response)


@router.get("/version/{consistency_type}/{catalog}/{database}/{table}", responses=problems(404))
async def table_version(
    consistency_type: Annotated[Literal["strong", "weak"], Path()],
    catalog: CatalogPath,
    database: DatabasePath,
    table: TablePath,
    session: SessionDep,
) -> TableVersion:
    """The snapshot of one table to read now (404 `no_consistent_version` before its first completion)."""
    name = table_name(catalog, database, table)
    result = await versions.consistent_versions(session, tables=[name], consistency=consistency_type)
    return TableVersion(
        table=name, consistency=consistency_type, barrier=result.barrier, snapshot_id=result.versions[name]
    )


@router.post("/unregister/{job_id}", responses=problems(404))
async def unregister(job_id: JobIdPath, session: SessionDep) -> Unregistration:
    """The job terminated: drop its edges and writer claims; its barrier history stays."""
    return await registry.unregister(session, job_id=job_id)
