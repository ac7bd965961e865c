"""Consistent reads without Spark: several tables at one consistent version as pyarrow Datasets.

DuckDB, Polars, pandas or any Arrow consumer can query them; a lease keeps the snapshots from being vacuumed
while the block runs, exactly as `consistent_tables` does for Spark.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from spark_client._http import MetaServiceClient
from spark_client.catalog.base import Catalog
from spark_client.reading import _default_holder

if TYPE_CHECKING:
    import pyarrow.dataset as pads


class ConsistentArrow(Mapping[str, "pads.Dataset"]):
    """The Datasets of a consistent read, with the barrier and snapshots they were opened at.

    Example:
        with consistent_arrow(client, catalog, ["lake.mart.a"]) as tables:
            print(tables.barrier, tables.snapshots, tables["lake.mart.a"].count_rows())
    """

    def __init__(self, datasets: Mapping[str, pads.Dataset], *, barrier: int, snapshots: Mapping[str, int]) -> None:
        self._datasets, self.barrier, self.snapshots = dict(datasets), barrier, dict(snapshots)

    def __getitem__(self, name: str) -> pads.Dataset:
        return self._datasets[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._datasets)

    def __len__(self) -> int:
        return len(self._datasets)


def arrow_dataset(catalog: Catalog, table: str, snapshot_id: int) -> pads.Dataset:
    """`table` at `snapshot_id` as a pyarrow Dataset, opened by its format's reader (`Catalog.arrow_dataset`).

    Delta: deltalake's `DeltaTable(version=…).to_pyarrow_dataset()`. Iceberg and Paimon: lazy over the
    snapshot's parquet files; their own readers for tables with deletes.

    Example:
        ds = arrow_dataset(catalog, "lake.raw.orders", 12)
        ds.to_table(filter=pyarrow.dataset.field("qty") > 3)
    """
    return catalog.arrow_dataset(table, snapshot_id)


@contextmanager
def consistent_arrow(
    client: MetaServiceClient,
    catalog: Catalog,
    names: Sequence[str],
    *,
    consistency: Literal["strong", "weak"] = "strong",
    holder: str | None = None,
    ttl_seconds: float = 600,
    min_barrier: int | None = None,
    max_staleness_seconds: float | None = None,
    wait_seconds: float | None = None,
) -> Iterator[ConsistentArrow]:
    """Yield pyarrow Datasets of `names` at one consistent version; a lease keeps them from expiring.

    No Spark is involved: each table is opened at the snapshot MetaService names (see `arrow_dataset`).

    Args:
        client: the MetaService client.
        catalog: where the tables live (a `RoutingCatalog` for several formats).
        names: tables to read together.
        consistency: "strong" (agrees with every other strong read of the pipeline) or "weak" (freshest).
        holder: lease holder name shown to admins (default: user@host:pid).
        ttl_seconds: lease lifetime; the lease is released when the block ends.
        min_barrier: read only a version at this barrier or later (see `MetaServiceClient.versions`).
        max_staleness_seconds: read only a version whose barrier is at most this old (database clock).
        wait_seconds: how long the server may wait for a version meeting the bound.

    Raises:
        NotFreshEnough: no version met the bound within `wait_seconds` (nothing was leased).

    Example:
        import duckdb, polars as pl

        with consistent_arrow(client, catalog, ["lake.mart.revenue", "lake.mart.orders"]) as t:
            con = duckdb.connect()
            con.register("revenue", t["lake.mart.revenue"])
            con.sql("select day, sum(revenue) from revenue group by day").fetchall()
            pl.scan_pyarrow_dataset(t["lake.mart.orders"]).group_by("day").agg(pl.col("amount").sum()).collect()
    """
    versions = client.versions(
        list(names),
        consistency,
        min_barrier=min_barrier,
        max_staleness_seconds=max_staleness_seconds,
        wait_seconds=wait_seconds,
    )
    lease = client.create_lease(holder or _default_holder(), versions.versions, ttl_seconds=ttl_seconds)
    try:
        datasets = {name: arrow_dataset(catalog, name, versions.versions[name]) for name in names}
        yield ConsistentArrow(datasets, barrier=versions.barrier, snapshots=versions.versions)
    finally:
        client.release_lease(lease.lease_id)
