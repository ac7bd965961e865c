"""MetaService tables as Dagster source assets: observed at a barrier (their `DataVersion`), with freshness
checks from the server's delays (`GET /tables/{c}/{d}/{t}/delay`)."""

# (no `from __future__ import annotations`: Dagster reads the context annotations as types)

from collections.abc import Sequence
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetKey,
    DataVersion,
    ObserveResult,
    OpExecutionContext,
    asset_check,
    observable_source_asset,
)

from metaservice_dagster._checks import check_tables
from metaservice_dagster.resources import Consistency, MetaServiceResource
from spark_client.errors import NoConsistentVersion


def table_asset_key(table: str) -> AssetKey:
    """`catalog.database.table` → AssetKey(["catalog", "database", "table"])."""
    return AssetKey(table.split("."))


def metaservice_source_assets(
    tables: Sequence[str],
    *,
    consistency: Consistency = "strong",
    resource_key: str = "metaservice",
    group_name: str | None = None,
) -> list[Any]:
    """One observable source asset per table. Observing it asks the server for the table's version: the
    asset's `DataVersion` is the barrier (so Dagster sees a new version exactly when a new barrier completed in
    the table), its metadata the snapshot id. A table that completed no barrier yet is observed without a
    version.

    Raises:
        ValueError: a bad table name (at definitions load time).

    Example:
        sources = metaservice_source_assets(["lake.mart.orders_enriched", "lake.mart.customer_dim"])
    """
    if consistency not in ("strong", "weak"):
        raise ValueError(f"consistency must be 'strong' or 'weak', got {consistency!r}")
    return [_source_asset(table, consistency, resource_key, group_name) for table in check_tables(tables)]


def _source_asset(table: str, consistency: Consistency, resource_key: str, group_name: str | None) -> Any:
    @observable_source_asset(
        key=table_asset_key(table),
        required_resource_keys={resource_key},
        group_name=group_name,
        description=f"{table}: its {consistency} version in MetaService; DataVersion = the barrier.",
    )
    def _observe(context: OpExecutionContext) -> ObserveResult:
        resource: MetaServiceResource = getattr(context.resources, resource_key)
        with resource.get_client() as client:
            try:
                version = client.version(table, consistency)
            except NoConsistentVersion:
                return ObserveResult(metadata={"table": table, "barrier": None})
        return ObserveResult(
            data_version=DataVersion(str(version.barrier)),
            metadata={"table": table, "barrier": version.barrier, "snapshot_id": version.snapshot_id},
        )

    return _observe


def metaservice_freshness_checks(
    tables: Sequence[str],
    *,
    max_freshness_seconds: float | None = None,
    max_lag_seconds: float | None = None,
    resource_key: str = "metaservice",
    severity: AssetCheckSeverity = AssetCheckSeverity.WARN,
) -> list[AssetChecksDefinition]:
    """One asset check per table from its delay as MetaService measures it: it passes while the table's
    `freshness_seconds` (age of its newest complete barrier) is at most `max_freshness_seconds` and/or its
    `lag_seconds` (how far behind the newest root data it is) at most `max_lag_seconds`. The metadata carries
    both figures, the barrier and the bottleneck job (the job on the critical path that took longest).

    Raises:
        ValueError: a bad table name or bound (at definitions load time).

    Example:
        checks = metaservice_freshness_checks(["lake.mart.revenue_by_day"], max_lag_seconds=3600)
    """
    names = check_tables(tables)
    if max_freshness_seconds is None and max_lag_seconds is None:
        raise ValueError("give max_freshness_seconds and/or max_lag_seconds")
    for name, value in (("max_freshness_seconds", max_freshness_seconds), ("max_lag_seconds", max_lag_seconds)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return [_freshness_check(t, max_freshness_seconds, max_lag_seconds, resource_key, severity) for t in names]


def _freshness_check(
    table: str,
    max_freshness: float | None,
    max_lag: float | None,
    resource_key: str,
    severity: AssetCheckSeverity,
) -> AssetChecksDefinition:
    key = table_asset_key(table)

    @asset_check(
        asset=key,
        name="metaservice_freshness",
        required_resource_keys={resource_key},
        description=f"{table} is fresh enough by MetaService's delays"
        + (f"; freshness <= {max_freshness:g}s" if max_freshness is not None else "")
        + (f"; lag <= {max_lag:g}s" if max_lag is not None else ""),
    )
    def _check(context: AssetCheckExecutionContext) -> AssetCheckResult:
        resource: MetaServiceResource = getattr(context.resources, resource_key)
        delay = resource.delay(table)
        freshness, lag = delay.get("freshness_seconds"), delay.get("lag_seconds")
        failures = []
        if delay.get("barrier") is None:
            failures.append("no barrier completed yet")
        if max_freshness is not None and (freshness is None or freshness > max_freshness):
            failures.append(f"freshness {freshness}s > {max_freshness:g}s")
        if max_lag is not None and (lag is None or lag > max_lag):
            failures.append(f"lag {lag}s > {max_lag:g}s")
        return AssetCheckResult(
            passed=not failures,
            severity=severity,
            description="; ".join(failures) or "fresh enough",
            metadata={
                "barrier": delay.get("barrier"),
                "freshness_seconds": freshness,
                "lag_seconds": lag,
                "bottleneck_job": delay.get("bottleneck_job"),
            },
        )

    return _check
