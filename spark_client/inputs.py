"""The inputs a transform receives: each source at exactly the barrier's snapshot."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from spark_client.catalog.base import Catalog
from spark_client.models import InputSnapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class Inputs(Mapping[str, "DataFrame"]):
    """Mapping from source table name to a DataFrame of that table at the barrier's snapshot.

    DataFrames are built lazily, on first access, so a transform that ignores an input never lists its files.

    Example:
        def transform(inputs: Inputs) -> dict[str, DataFrame]:
            orders = inputs["lake.raw.orders"]             # the whole table at the barrier
            new = inputs.changes("lake.raw.orders")        # only rows added since the previous barrier
            return {"lake.mart.orders_enriched": new.withColumn("total", new.qty * new.price)}
    """

    def __init__(
        self, spark: SparkSession, catalog: Catalog, snapshots: Mapping[str, InputSnapshot], *, barrier: int
    ) -> None:
        self._spark, self._catalog, self._snapshots = spark, catalog, dict(snapshots)
        self._frames: dict[str, DataFrame] = {}
        self.barrier = barrier

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._snapshots:
            raise KeyError(f"{name!r} is not a source of this job; sources: {sorted(self._snapshots)}")
        if name not in self._frames:
            self._frames[name] = self._catalog.read_at(self._spark, name, self._snapshots[name].snapshot_id)
        return self._frames[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._snapshots)

    def __len__(self) -> int:
        return len(self._snapshots)

    def snapshot_id(self, name: str) -> int:
        """The snapshot of `name` this barrier reads."""
        return self._snapshots[name].snapshot_id

    def changes(self, name: str) -> DataFrame:
        """Rows of an append-only source added since the job's previous barrier (everything the first time).

        Raises:
            ValueError: the source was overwritten in between (it is not append-only).
        """
        snapshot = self._snapshots[name]
        return self._catalog.read_changes(
            self._spark,
            name,
            after_snapshot_id=snapshot.previous_snapshot_id,
            snapshot_id=snapshot.snapshot_id,
        )
