"""A sensor factory: one RunRequest per new consistent barrier of a set of tables.

Exactly one run per barrier: the run key is built from the tables and the barrier, and Dagster launches at most
one run per run key of a sensor, whatever happens to the cursor; the cursor (the last barrier requested) makes the
next evaluation ask the server only for a newer barrier. An evaluation killed after it yielded a request but
before its cursor was stored asks again for the same barrier, yields the same run key, and Dagster skips it.

Waiting is the server's long poll: each evaluation asks `POST /versions` for a barrier after the cursor with
`wait_seconds`, and is answered as soon as one is committed. A server that is down or answers 503 makes the
evaluation skip (with the reason), never fail; the next evaluation asks again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dagster import (
    DefaultSensorStatus,
    JobDefinition,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from metaservice_dagster._checks import check_bound, check_tables
from metaservice_dagster.config import MetaServiceVersions
from metaservice_dagster.resources import Consistency, MetaServiceResource
from spark_client.errors import Unavailable
from spark_client.models import ConsistentVersions

RunConfigFn = Callable[[MetaServiceVersions], Mapping[str, Any]]
BARRIER_TAG, TABLES_TAG = "metaservice/barrier", "metaservice/tables"


def tables_key(tables: Sequence[str], consistency: str) -> str:
    """A short stable name of (tables, consistency): the prefix of every run key of the sensor."""
    digest = hashlib.sha256(json.dumps([sorted(tables), consistency]).encode()).hexdigest()
    return digest[:16]


def run_key(tables: Sequence[str], consistency: str, barrier: int) -> str:
    """The run key of the run for `barrier`: the same for the same tables and barrier, in any evaluation."""
    return f"metaservice:{tables_key(tables, consistency)}:{barrier}"


def metaservice_consistency_sensor(
    *,
    name: str,
    tables: Sequence[str],
    job: JobDefinition | Any | None = None,  # a JobDefinition or define_asset_job(...)
    job_name: str | None = None,
    consistency: Consistency = "strong",
    min_barrier: int | None = None,
    max_staleness_seconds: float | None = None,
    ops: Sequence[str] = (),
    run_config_fn: RunConfigFn | None = None,
    wait_seconds: float = 20.0,
    minimum_interval_seconds: int = 30,
    resource_key: str = "metaservice",
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
) -> SensorDefinition:
    """A sensor that requests one run of `job` per new consistent barrier of `tables`.

    Each run gets the barrier and the snapshot id of every table: in its tags (`metaservice/barrier`, and
    `metaservice/snapshots` as JSON) and, for each op named in `ops`, as that op's config
    (`MetaServiceVersions`: `barrier`, `snapshots`), or as `run_config_fn(versions)` returns it. The run reads
    exactly these snapshots, whatever was committed since.

    Args:
        name: the sensor's name.
        tables: `catalog.database.table` names that must be consistent together.
        job / job_name: what to run.
        consistency: "strong" or "weak".
        min_barrier: no run for barriers below this one.
        max_staleness_seconds: the first run only for a version at most this old (later runs are for newer
            barriers anyway). Not with `min_barrier`.
        ops: ops (or assets) whose config is `MetaServiceVersions`.
        run_config_fn: builds the run config from the versions instead.
        wait_seconds: how long one evaluation waits on the server for a new barrier (at most the server's
            `max_wait_seconds`, and below Dagster's 60 s sensor evaluation timeout).
        minimum_interval_seconds: between evaluations.
        resource_key: the `MetaServiceResource`'s key.

    Raises:
        ValueError: a bad argument (at definitions load time).

    Example:
        sensor = metaservice_consistency_sensor(name="revenue_ready", tables=["lake.mart.a", "lake.mart.b"],
                                                job=report_job, ops=["report"])
    """
    names = check_tables(tables)
    consistency, min_barrier, max_staleness_seconds = check_bound(consistency, min_barrier, max_staleness_seconds)
    if not 0 <= wait_seconds <= 50:
        raise ValueError(
            f"wait_seconds must be between 0 and 50 (a sensor evaluation times out at 60 s): {wait_seconds}"
        )
    if ops and run_config_fn is not None:
        raise ValueError("give ops or run_config_fn, not both")
    if (job is None) == (job_name is None):
        raise ValueError("give exactly one of job and job_name")
    op_names = list(ops)

    def run_config(versions: MetaServiceVersions) -> dict[str, Any]:
        if run_config_fn is not None:
            return dict(run_config_fn(versions))
        return {"ops": {op: {"config": versions.model_dump()} for op in op_names}} if op_names else {}

    @sensor(
        name=name,
        job=job,
        job_name=job_name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        required_resource_keys={resource_key},
        description=f"One run per new {consistency} consistent barrier of {', '.join(names)} (MetaService).",
    )
    def _sensor(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        resource: MetaServiceResource = getattr(context.resources, resource_key)
        last = cursor_barrier(context.cursor)
        if last is not None:
            bound: dict[str, Any] = {"min_barrier": max(last + 1, min_barrier or 0)}
        elif max_staleness_seconds is not None:
            bound = {"max_staleness_seconds": max_staleness_seconds}
        else:
            bound = {"min_barrier": min_barrier or 0}
        try:
            found = resource.consistent_versions(names, consistency, wait_seconds=wait_seconds, **bound)
        except Unavailable as exc:
            return SkipReason(f"MetaService unavailable, asking again at the next evaluation: {exc}")
        if found is None:
            return SkipReason(f"no new {consistency} consistent barrier of {names} ({bound})")
        return SensorResult(run_requests=[run_request(names, found, run_config)], cursor=cursor_for(found.barrier))

    return _sensor


def run_request(
    tables: Sequence[str], found: ConsistentVersions, run_config: Callable[[MetaServiceVersions], dict[str, Any]]
) -> RunRequest:
    """The run for one barrier: its key, config and tags."""
    versions = MetaServiceVersions(
        barrier=found.barrier, snapshots=dict(found.versions), consistency=found.consistency, tables=list(tables)
    )
    return RunRequest(
        run_key=run_key(tables, found.consistency, found.barrier),
        run_config=run_config(versions),
        tags={
            BARRIER_TAG: str(found.barrier),
            "metaservice/snapshots": json.dumps(dict(found.versions), sort_keys=True),
            TABLES_TAG: ",".join(tables),
        },
    )


def cursor_barrier(cursor: str | None) -> int | None:
    """The last barrier requested, from the sensor's cursor (None: nothing requested yet)."""
    if not cursor:
        return None
    value = json.loads(cursor).get("barrier")
    return int(value) if value is not None else None


def cursor_for(barrier: int) -> str:
    return json.dumps({"barrier": barrier})
