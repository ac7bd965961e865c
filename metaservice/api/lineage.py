"""Admin insight: lineage graph, end-to-end delays with critical paths, and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated

import pydantic_core
from fastapi import APIRouter, Query, Request, Response

from metaservice import observability
from metaservice.api.deps import CatalogPath, DatabaseDep, DatabasePath, TablePath, table_name
from metaservice.api.responses import problems
from metaservice.schemas import TABLE_PATTERN, DelayList, LineageDirection, LineageGraph, TableDelay
from metaservice.services import delays, lineage

router = APIRouter(tags=["inspection"])

TableQuery = Annotated[
    str | None,
    Query(pattern=TABLE_PATTERN, max_length=386, description="`catalog.database.table`; omit for the whole graph"),
]
DepthQuery = Annotated[
    int, Query(ge=0, le=lineage.MAX_DEPTH, description="job hops from the table (ignored for the whole graph)")
]
MaxNodesQuery = Annotated[
    int, Query(ge=1, le=lineage.MAX_NODES, description="node cap; a graph cut short says `truncated: true`")
]
BarrierQuery = Annotated[
    int | None,
    Query(ge=1, le=2**63 - 1, description="analyse this barrier instead of the newest one the table completed"),
]


@router.get("/lineage", response_model=LineageGraph, responses=problems(404))
async def get_lineage(
    db: DatabaseDep,
    table: TableQuery = None,
    direction: LineageDirection = "both",
    depth: DepthQuery = lineage.DEFAULT_DEPTH,
    max_nodes: MaxNodesQuery = lineage.DEFAULT_MAX_NODES,
) -> Response:
    """Tables, jobs and current edges around `table` (upstream, downstream or both; `depth` job hops), or all.

    Node ids are `table:<name>` and `job:<id>`; an edge goes from a table to a job reading it and from a job to a
    table it writes. Table nodes carry their newest complete barrier, snapshot and delay; job nodes their recent
    barrier timings.
    """
    graph = await lineage.lineage_graph(db, table=table, direction=direction, depth=depth, max_nodes=max_nodes)
    # Serialised directly from plain data in the model's wire shape: answers run to tens of thousands of nodes, and
    # building and validating models for them would cost more than the rest of the request.
    return Response(pydantic_core.to_json(graph), media_type="application/json")


@router.get("/tables/{catalog}/{database}/{table}/delay", responses=problems(404))
async def get_table_delay(
    catalog: CatalogPath,
    database: DatabasePath,
    table: TablePath,
    db: DatabaseDep,
    barrier: BarrierQuery = None,
) -> TableDelay:
    """End-to-end delay of a table and the critical path of its newest complete barrier, with the bottleneck job.

    `delay_seconds` = now (database clock, `as_of`) minus `issued_at` of `barrier`. The critical path runs from the
    roots to the table; per job, `waiting_seconds` = inputs ready → started and `processing_seconds` = started →
    finished (idle steps, whose inputs did not change, process nothing). The bottleneck is the job with the largest
    sum. A table that completed no barrier yet answers 200 with `barrier`, `delay_seconds` and `bottleneck_job`
    null and an empty path. With `barrier=B`: 404 `not_found` if B was never issued, 404 `no_consistent_version`
    if the table did not complete B.
    """
    return await delays.table_delay(db, table=table_name(catalog, database, table), barrier=barrier)


@router.get("/delays", responses=problems())
async def list_delays(db: DatabaseDep) -> DelayList:
    """Every table's delay with its bottleneck job, worst first; tables that completed nothing come first."""
    return await delays.all_delays(db)


@router.get(
    "/metrics",
    tags=["operations"],
    response_class=Response,
    responses={200: {"content": {observability.METRICS_CONTENT_TYPE: {}}, "description": "Prometheus text format"}},
)
async def metrics(request: Request, db: DatabaseDep) -> Response:
    """Prometheus text, from memory: database figures are refreshed in the background (the same from every
    process, at most `METASERVICE_METRICS_REFRESH_SECONDS` old); request and pool figures are per process. With
    `METASERVICE_METRICS_AUTH=true` (and authentication on) a scrape needs a token of any role."""
    refresher: observability.MetricsRefresher = request.app.state.metrics_figures
    http_metrics: observability.HttpMetrics = request.app.state.http_metrics
    body = await http_metrics.scrape(refresher.figures, refresher.read_at, pool=db.pool_figures())
    return Response(body, media_type=observability.METRICS_CONTENT_TYPE)
