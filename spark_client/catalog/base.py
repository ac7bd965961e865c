"""The table-format interface the job logic depends on; Delta implements it, Paimon and Iceberg can follow."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@runtime_checkable
class Catalog(Protocol):
    """Where tables live and how their snapshots are read, written and tagged with barriers.

    A snapshot id is the format's own version number (Delta version, Paimon snapshot id, Iceberg snapshot
    id); ids of one table grow with every commit. A format implements "exactly once per barrier" by storing
    `(app_id, barrier)` atomically with the commit (Delta app transaction, Paimon commit identifier, Iceberg
    snapshot property) and finding it again in `committed_snapshot`.

    Example:
        def latest(catalog: Catalog, tables: list[str]) -> dict[str, int | None]:
            return {t: catalog.latest_snapshot(t) for t in tables}
    """

    @property
    def format(self) -> str:
        """The table format MetaService records for tables of this catalog, e.g. "delta"."""
        ...

    def location(self, table: str) -> str:
        """The storage location of `table` (`catalog.database.table`); ValueError for a malformed name."""
        ...

    def latest_snapshot(self, table: str) -> int | None:
        """The newest snapshot id of `table`, or None when the table does not exist yet."""
        ...

    def read_at(self, spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
        """`table` exactly as of `snapshot_id`."""
        ...

    def read_changes(
        self, spark: SparkSession, table: str, *, after_snapshot_id: int | None, snapshot_id: int
    ) -> DataFrame:
        """Rows of an append-only `table` added after `after_snapshot_id` up to `snapshot_id` (None: all)."""
        ...

    def append(self, spark: SparkSession, df: DataFrame, table: str) -> int:
        """Commit `df` as new rows of `table` without a barrier tag; returns the new snapshot id."""
        ...

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
    ) -> int:
        """Commit `df` to `table`, tagged with `(app_id, barrier)` when given; returns the new snapshot id."""
        ...

    def committed_snapshot(self, table: str, *, app_id: str, barrier: int) -> int | None:
        """The snapshot `app_id` already committed for `barrier` (a run that crashed before reporting it)."""
        ...
