"""OpenLineage ingest: the endpoint OpenLineage's HTTP transport posts to by default."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response, status

from metaservice.api.auth import PrincipalDep
from metaservice.api.deps import DatabaseDep, SettingsDep
from metaservice.api.responses import problems
from metaservice.openlineage.events import IngestedEvent, OpenLineageEvent
from metaservice.openlineage.mapping import DatasetMapping
from metaservice.services import openlineage_ingest as ingest

router = APIRouter(tags=["OpenLineage"])

UNCHANGED: dict[int | str, dict[str, Any]] = {
    200: {"model": IngestedEvent, "description": "Every edge was registered already, or the event names none"}
}


async def _mapping(request: Request) -> DatasetMapping:
    """The process's dataset → table rules (`METASERVICE_OPENLINEAGE_DATASETS`), compiled once."""
    mapping: DatasetMapping = request.app.state.openlineage_datasets
    return mapping


MappingDep = Annotated[DatasetMapping, Depends(_mapping)]


@router.post(
    "/api/v1/lineage",
    status_code=status.HTTP_201_CREATED,
    responses={**UNCHANGED, **problems(403, 409)},
)
async def ingest_lineage_event(
    event: Annotated[OpenLineageEvent, Body()],
    mapping: MappingDep,
    response: Response,
    db: DatabaseDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> IngestedEvent:
    """Take an OpenLineage RunEvent or JobEvent: its inputs register the job's sources, its outputs its sinks
    (201 when an edge is new, 200 when all were there). Job id = the job name; datasets map to tables by
    `METASERVICE_OPENLINEAGE_DATASETS` (default: a dataset named `catalog.database.table` is that table).

    The same problems as `/register/...` (409 `table_has_writer`, `cycle`, `table_name_conflict`; 403 outside a
    job token's jobs or table namespaces); all of an event's edges or none. Datasets that map to no table are
    listed in `ignored` (or 422 with `METASERVICE_OPENLINEAGE_UNMAPPED=reject`). A DatasetEvent registers
    nothing."""
    result = await ingest.ingest_event(
        db, event=event, mapping=mapping, unmapped=settings.openlineage_unmapped, principal=principal
    )
    response.status_code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
    return result
