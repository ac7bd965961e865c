"""One `Catalog` over tables of several formats, so that one pipeline (even one job) may mix them."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spark_client.catalog.base import Catalog, CommitRecord

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from pyspark.sql import DataFrame, SparkSession

    from spark_client._http import MetaServiceClient
    from spark_client.modes import ModeName, WriteMode


class RoutingCatalog:
    """Sends each table to the catalog of the first pattern its name matches (`fnmatch`), else to `default`.

    Every `Catalog` method is delegated, so `EtlJob`, `consistent_tables`, `consistent_arrow` and
    `apply_rollback` work unchanged on a pipeline whose tables live in different formats, e.g. a Delta root
    feeding Iceberg marts. `format` is the default catalog's; `format_of(table)` names each table's own.

    Args:
        routes: pattern → catalog, tried in order, e.g. `{"lake.mart.*": iceberg}`.
        default: the catalog of every table no pattern matches.

    Example:
        catalog = RoutingCatalog({"lake.mart.*": IcebergCatalog("/data/lake")}, default=DeltaCatalog("/data/lake"))
        job = EtlJob(spark, client, catalog, job_id="enrich",
                     sources=["lake.raw.orders"], sinks=["lake.mart.orders_enriched"])   # Delta in, Iceberg out
    """

    def __init__(self, routes: Mapping[str, Catalog] | Sequence[tuple[str, Catalog]], *, default: Catalog) -> None:
        self.routes = list(routes.items()) if isinstance(routes, Mapping) else list(routes)
        self.default = default

    def __repr__(self) -> str:
        routes = ", ".join(f"{pattern!r}: {catalog!r}" for pattern, catalog in self.routes)
        return f"RoutingCatalog({{{routes}}}, default={self.default!r})"

    @property
    def format(self) -> str:
        """The default catalog's format (see `format_of` for a given table)."""
        return self.default.format

    def catalog_for(self, table: str) -> Catalog:
        """The catalog holding `table`.

        Example:
            catalog.catalog_for("lake.mart.revenue").format   # "iceberg"
        """
        for pattern, catalog in self.routes:
            if fnmatch.fnmatchcase(table, pattern):
                return catalog
        return self.default

    def format_of(self, table: str) -> str:
        """The format of `table` ("delta", "iceberg", "paimon").

        Example:
            catalog.format_of("lake.raw.orders")   # "delta"
        """
        return self.catalog_for(table).format

    def location(self, table: str) -> str:
        """The storage location of `table` in its catalog."""
        return self.catalog_for(table).location(table)

    def latest_snapshot(self, table: str) -> int | None:
        """The newest snapshot id of `table` in its catalog."""
        return self.catalog_for(table).latest_snapshot(table)

    def read_at(self, spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
        """`table` as of `snapshot_id`, read by its catalog."""
        return self.catalog_for(table).read_at(spark, table, snapshot_id)

    def read_changes(
        self, spark: SparkSession, table: str, *, after_snapshot_id: int | None, snapshot_id: int
    ) -> DataFrame:
        """Rows added between two snapshots of an append-only `table`, read by its catalog."""
        return self.catalog_for(table).read_changes(
            spark, table, after_snapshot_id=after_snapshot_id, snapshot_id=snapshot_id
        )

    def append(self, spark: SparkSession, df: DataFrame, table: str) -> int:
        """Commit `df` as new rows of `table` in its catalog."""
        return self.catalog_for(table).append(spark, df, table)

    def write(
        self,
        spark: SparkSession,
        df: DataFrame,
        table: str,
        *,
        mode: WriteMode | ModeName,
        app_id: str | None = None,
        barrier: int | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> int:
        """Write `df` to `table` with its catalog (see `Catalog.write`)."""
        return self.catalog_for(table).write(
            spark, df, table, mode=mode, app_id=app_id, barrier=barrier, metadata=metadata
        )

    def restore(self, table: str, snapshot_id: int | None, *, metadata: Mapping[str, str] | None = None) -> int:
        """Restore `table` to `snapshot_id` (None: no rows) with its catalog's own mechanism."""
        return self.catalog_for(table).restore(table, snapshot_id, metadata=metadata)

    def commits_after(self, table: str, snapshot_id: int | None) -> list[CommitRecord]:
        """The commits of `table` after `snapshot_id`, newest first, read by its catalog."""
        return self.catalog_for(table).commits_after(table, snapshot_id)

    def vacuum(
        self,
        table: str,
        client: MetaServiceClient,
        *,
        min_orphan_age_seconds: float = 3600,
        dry_run: bool = False,
    ) -> list[str]:
        """Vacuum/expire `table` with its catalog, keeping every protected snapshot."""
        return self.catalog_for(table).vacuum(
            table, client, min_orphan_age_seconds=min_orphan_age_seconds, dry_run=dry_run
        )

    def committed_snapshot(self, table: str, *, app_id: str, barrier: int) -> int | None:
        """The snapshot `app_id` committed for `barrier` in `table`, found by its catalog."""
        return self.catalog_for(table).committed_snapshot(table, app_id=app_id, barrier=barrier)

    def arrow_dataset(self, table: str, snapshot_id: int) -> pads.Dataset:
        """`table` at `snapshot_id` as a pyarrow Dataset, read by its format's reader."""
        return self.catalog_for(table).arrow_dataset(table, snapshot_id)
