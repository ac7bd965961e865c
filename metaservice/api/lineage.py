"""Admin insight: lineage graph, end-to-end delays with critical paths, and Prometheus metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import orjson
import pydantic_core
from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BeforeValidator

from metaservice import observability
from metaservice.api.deps import (
    CatalogPath,
    DatabaseDep,
    DatabasePath,
    RuntimeDep,
    TablePath,
    plain_digits,
    table_name,
)
from metaservice.api.responses import problems
from metaservice.schemas import (
    JOB_PATTERN,
    TABLE_PATTERN,
    DelayList,
    LineageChangeList,
    LineageDirection,
    LineageGraph,
    SnapshotLineage,
    TableDelay,
)
from metaservice.services import delays, lineage, lineage_changes, snapshot_lineage
from metaservice.services.as_of import AS_OF_SCHEMA, parse_as_of

if TYPE_CHECKING:
    from metaservice.metrics_process import FiguresProcess

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
AS_OF_HELP = "a barrier number, or an ISO-8601 time with a time zone (e.g. `2026-11-24T09:00:00Z`)"
AsOfQuery = Annotated[str | None, Query(description=f"the graph as of {AS_OF_HELP}", json_schema_extra=AS_OF_SCHEMA)]
SnapshotPath = Annotated[
    int, Path(ge=0, le=2**63 - 1, description="snapshot id (digits only)"), BeforeValidator(plain_digits)
]
SnapshotDepthQuery = Annotated[
    int, Query(ge=0, le=snapshot_lineage.MAX_DEPTH, description="levels of input snapshots to follow")
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
    as_of: AsOfQuery = None,
) -> Response:
    """Tables, jobs and current edges around `table` (upstream, downstream or both; `depth` job hops), or all.

    Node ids are `table:<name>` and `job:<id>`; an edge goes from a table to a job reading it and from a job to a
    table it writes. Table nodes carry their newest complete barrier, snapshot, freshness and lag; job nodes their
    recent barrier timings.

    `as_of`: the graph as it was. A barrier B answers the lineage in effect at B (edges added before B and not
    removed before it) with node states as of B; a time T answers the edges that existed at T, with node states as
    of the newest barrier issued by T. Freshness is then measured against that moment; `latest_snapshot_id` and
    `lag_seconds` are null (not kept through time). 422 for a value that is neither, or a time without a time
    zone; 404 for a barrier never issued.
    """
    spec = None if as_of is None else parse_as_of(as_of)
    # Serialised directly from plain data in the model's wire shape: answers run to tens of thousands of nodes, and
    # building and validating models for them would cost more than the rest of the request. orjson writes the bytes
    # pydantic writes for every kind of value an answer holds (tests/unit/test_lineage_json.py), 2.5x faster. The
    # data is dropped before the collector resumes.
    with lineage.collection_paused():
        body = orjson.dumps(
            await lineage.lineage_graph(
                db, table=table, direction=direction, depth=depth, max_nodes=max_nodes, as_of=spec
            ),
            option=orjson.OPT_UTC_Z,
        )
    return Response(body, media_type="application/json")


@router.get("/lineage/changes", response_model=LineageChangeList, responses=problems())
async def get_lineage_changes(
    db: DatabaseDep,
    table: Annotated[str | None, Query(pattern=TABLE_PATTERN, max_length=386, description="only this table")] = None,
    job: Annotated[str | None, Query(pattern=JOB_PATTERN, max_length=200, description="only this job")] = None,
    since: Annotated[
        str | None,
        Query(description=f"changes at or after {AS_OF_HELP}", json_schema_extra=AS_OF_SCHEMA),
    ] = None,
    until: Annotated[
        str | None, Query(description=f"changes before {AS_OF_HELP}", json_schema_extra=AS_OF_SCHEMA)
    ] = None,
    limit: Annotated[int, Query(ge=1, le=lineage_changes.MAX_LIMIT, description="page size")] = (
        lineage_changes.DEFAULT_LIMIT
    ),
    cursor: Annotated[
        str | None,
        Query(pattern=lineage_changes.CURSOR_PATTERN, description="`next` of the previous page"),
    ] = None,
) -> Response:
    """Every lineage change (an edge added or removed), newest first, a page at a time.

    `barrier` is the newest barrier issued when the change committed: the change is in effect from the next
    barrier on (`effective_barrier`, null while none was issued), so `GET /lineage?as_of=<effective_barrier>` is
    the first graph with it. `since`/`until` bound the commit time (a time) or `barrier` (a barrier number).
    """
    page = await lineage_changes.lineage_changes(
        db,
        table=table,
        job=job,
        since=None if since is None else parse_as_of(since, name="since"),
        until=None if until is None else parse_as_of(until, name="until"),
        limit=limit,
        cursor=None if cursor is None else lineage_changes.decode_cursor(cursor),
    )
    return Response(pydantic_core.to_json(page), media_type="application/json")


@router.get(
    "/tables/{catalog}/{database}/{table}/snapshots/{snapshot_id}/lineage",
    response_model=SnapshotLineage,
    responses=problems(404),
)
async def get_snapshot_lineage(
    catalog: CatalogPath,
    database: DatabasePath,
    table: TablePath,
    snapshot_id: SnapshotPath,
    db: DatabaseDep,
    depth: SnapshotDepthQuery = snapshot_lineage.DEFAULT_DEPTH,
) -> Response:
    """The run that produced the snapshot (job, barrier, timings) and the input snapshots it read, recursively
    to the roots (`depth` levels). A root's snapshot has `job` null and no inputs; an entry whose inputs the depth
    or the entry cap cut says `truncated`. 404 for an unknown table or a snapshot the table never held."""
    tree = await snapshot_lineage.snapshot_lineage(
        db, table=table_name(catalog, database, table), snapshot_id=snapshot_id, depth=depth
    )
    return Response(pydantic_core.to_json(tree), media_type="application/json")


@router.get("/tables/{catalog}/{database}/{table}/delay", responses=problems(404))
async def get_table_delay(
    catalog: CatalogPath,
    database: DatabasePath,
    table: TablePath,
    rt: RuntimeDep,
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
    return await delays.table_delay(rt, table=table_name(catalog, database, table), barrier=barrier)


@router.get("/delays", responses=problems())
async def list_delays(rt: RuntimeDep) -> DelayList:
    """Every table's delay with its bottleneck job, worst first; tables that completed nothing come first."""
    return await delays.all_delays(rt)


@router.get(
    "/metrics",
    tags=["operations"],
    response_class=Response,
    responses={200: {"content": {observability.METRICS_CONTENT_TYPE: {}}, "description": "Prometheus text format"}},
)
async def metrics(request: Request, db: DatabaseDep) -> Response:
    """Prometheus text, from memory: database figures are read and rendered in the background by the server's
    figures process (the same from every process, at most `METASERVICE_METRICS_REFRESH_SECONDS` old); request and
    pool figures are per process. With `METASERVICE_METRICS_AUTH=true` (and authentication on) a scrape needs a
    token of any role."""
    figures: FiguresProcess = request.app.state.metrics_figures
    http_metrics: observability.HttpMetrics = request.app.state.http_metrics
    body = await http_metrics.scrape(figures.rendering, pool=db.pool_figures())
    return Response(body, media_type=observability.METRICS_CONTENT_TYPE)
