"""What a downstream task reads: the barrier and snapshot ids it was handed (never "the newest" at run time)."""

from __future__ import annotations

from typing import Any


def handed_versions(context: Any, *, sensor_task_id: str | None = None) -> dict[str, Any]:
    """The consistent version handed to this run: `{"barrier", "snapshots", "consistency", "tables"}`.

    With `sensor_task_id`, the version `MetaServiceConsistencySensor` returned (XCom). Without it, the newest
    barrier among the run's triggering asset events emitted by `MetaServiceConsistencyTrigger` (Airflow may
    gather several events into one asset-triggered run; the newest barrier's snapshots are consistent and
    include everything the earlier ones did).

    Raises:
        LookupError: the run was handed no version.

    Example:
        @task
        def report(**context):
            versions = handed_versions(context)
            spark_job(snapshots=versions["snapshots"])
    """
    if sensor_task_id is not None:
        value = context["ti"].xcom_pull(task_ids=sensor_task_id)
        if not isinstance(value, dict) or "barrier" not in value:
            raise LookupError(f"task {sensor_task_id!r} handed no MetaService version (XCom: {value!r})")
        return dict(value)
    found: list[dict[str, Any]] = []
    events = context.get("triggering_asset_events") or {}
    for asset_events in events.values():
        for event in asset_events:
            extra = getattr(event, "extra", None) or {}
            payload = extra.get("payload") if isinstance(extra, dict) else None
            if isinstance(payload, dict) and payload.get("status") == "ok" and "barrier" in payload:
                found.append(payload)
    if not found:
        raise LookupError("this run was not triggered by a MetaServiceConsistencyTrigger asset event")
    newest = max(found, key=lambda payload: int(payload["barrier"]))
    return {k: newest[k] for k in ("barrier", "snapshots", "consistency", "tables") if k in newest}
