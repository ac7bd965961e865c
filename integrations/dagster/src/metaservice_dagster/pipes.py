"""Dagster Pipes, on the job's side: a `spark_client` job reports the barrier it committed and the snapshot of
each sink as materialization metadata, and reads the snapshot ids Dagster handed it.

This module imports `dagster_pipes` only (not `dagster`): it runs inside the Spark driver's process.

Example (the job, started by `PipesSubprocessClient` or any Pipes client):

    from dagster_pipes import open_dagster_pipes
    from metaservice_dagster.pipes import handed_versions, report_run

    with open_dagster_pipes() as pipes:
        handed = handed_versions(pipes)          # {"barrier", "snapshots"} from the run's config, or None
        result = job.run_once(transform)         # spark_client.EtlJob
        report_run(pipes, result)                # barrier and snapshots as materialization metadata
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXTRA_KEY = "metaservice"


def report_run(pipes: Any, result: Any, *, asset_keys: Mapping[str, str] | None = None) -> None:
    """Report a `spark_client` run (`RunResult`: action, barrier, snapshots) to Dagster.

    Processed barrier: one materialization (or one per sink table when `asset_keys` maps sink tables to asset
    keys, e.g. {"lake.mart.a": "lake/mart/a"}) whose data version is the barrier and whose metadata holds the
    barrier, the action and the snapshot id of each sink. Nothing processed (idle, wait, aborted): one
    materialization without a data version, its metadata saying why.
    """
    action = str(getattr(result, "action", ""))
    barrier = getattr(result, "barrier", None)
    snapshots = {str(k): int(v) for k, v in dict(getattr(result, "snapshots", {}) or {}).items()}
    metadata: dict[str, Any] = {
        "metaservice_action": action,
        "metaservice_barrier": barrier,
        "metaservice_snapshots": {"raw_value": snapshots, "type": "json"},
    }
    version = str(barrier) if action == "process" and barrier is not None else None
    if action == "aborted":
        metadata["metaservice_reason"] = getattr(result, "reason", None)
    if asset_keys and action == "process":
        for table, key in asset_keys.items():
            if table not in snapshots:
                raise ValueError(f"asset_keys names {table!r}, which the run did not commit (it wrote {snapshots})")
            pipes.report_asset_materialization(
                metadata={**metadata, "snapshot_id": snapshots[table], "table": table},
                data_version=version,
                asset_key=key,
            )
        return
    pipes.report_asset_materialization(metadata=metadata, data_version=version)


def handed_versions(pipes: Any) -> dict[str, Any] | None:
    """The versions the orchestrator handed this job (`extras={"metaservice": {...}}` of the Pipes client):
    `{"barrier", "snapshots"}`, or None when it handed none."""
    extras = getattr(pipes, "extras", None) or {}
    value = extras.get(EXTRA_KEY)
    return dict(value) if isinstance(value, Mapping) else None


def pipes_extras(versions: Any) -> dict[str, Any]:
    """The Pipes `extras` that hand `versions` (a `MetaServiceVersions` config, or a mapping with barrier and
    snapshots) to the job, on the orchestrator's side."""
    if isinstance(versions, Mapping):
        barrier, snapshots = versions["barrier"], versions["snapshots"]
    else:
        barrier, snapshots = versions.barrier, versions.snapshots
    return {EXTRA_KEY: {"barrier": int(barrier), "snapshots": {str(k): int(v) for k, v in snapshots.items()}}}
