"""The table-format interface the job logic depends on; Delta implements it, Paimon and Iceberg can follow."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@runtime_checkable
class Catalog(Protocol):
    """Where tables live and how snapshots are read, written and tagged with barriers."""

    format: str

    def location(self, table: str) -> str: ...

    def latest_snapshot(self, table: str) -> int | None: ...

    def read_at(self, spark: SparkSession, table: str, snapshot_id: int) -> DataFrame: ...

    def read_changes(
        self, spark: SparkSession, table: str, *, after_snapshot_id: int | None, snapshot_id: int
    ) -> DataFrame: ...

    def write(
        self,
        spark: SparkSession,
        df: DataFrame,
        table: str,
        *,
        mode: Literal["append", "overwrite"],
        app_id: str | None = None,
        barrier: int | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> int: ...

    def committed_snapshot(self, table: str, *, app_id: str, barrier: int) -> int | None: ...
