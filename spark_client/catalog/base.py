"""The table-format interface the job logic depends on, and the errors every format raises alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from pyspark.sql import DataFrame, SparkSession

    from spark_client._http import MetaServiceClient
    from spark_client.modes import ModeName, WriteMode


class SchemaMismatch(ValueError):
    """A write whose columns or types differ from the table's schema; nothing was committed.

    Attributes:
        table: the table written to.
        columns: one entry per differing column: `"<name>: table <type>, data <type>"` (`missing` on the side
            that lacks the column).
        hint: what to write instead: the `schema=` policy of the write mode (or a cast) that fits the difference.
    """

    def __init__(self, table: str, columns: Sequence[str]) -> None:
        self.table, self.columns = table, tuple(columns)
        self.hint = schema_hint(self.columns)
        super().__init__(f"the data does not match the schema of {table!r}: {'; '.join(columns)}. {self.hint}")


def schema_hint(columns: Sequence[str]) -> str:
    """The `schema=` choice (or the cast) that resolves the differing `columns` of a `SchemaMismatch`."""
    added = [c.split(":")[0] for c in columns if ": table missing," in c]
    dropped = [c.split(":")[0] for c in columns if c.endswith(", data missing")]
    retyped = [c.split(":")[0] for c in columns if c.split(":")[0] not in {*added, *dropped}]
    hints = []
    if added or dropped:
        what = " and ".join(
            part
            for part in (
                f"add the new columns {added}" if added else "",
                f"write the missing columns {dropped} as NULL" if dropped else "",
            )
            if part
        )
        hints.append(f"to {what}, write with schema='merge' (e.g. Append(schema='merge'), Merge(keys, schema='merge'))")
    if retyped:
        hints.append(
            f"cast {retyped} to the table's types in the transform, or replace the table's schema with a "
            "whole-table Overwrite(schema='overwrite')"
        )
    if not hints:
        hints.append("write with schema='merge' or, for a whole-table Overwrite, schema='overwrite'")
    text = "; ".join(hints)
    return text[0].upper() + text[1:] + "; nothing was written"


class NotAppendOnly(ValueError):
    """An incremental read across snapshots that removed data (an overwrite, a MERGE, a restore).

    Attributes:
        table: the table read.
        after_snapshot_id: the snapshot the read counted changes from.
        snapshot_id: the snapshot read.

    Example:
        try:
            new = catalog.read_changes(spark, "lake.raw.orders", after_snapshot_id=3, snapshot_id=5)
        except NotAppendOnly as exc:
            new = catalog.read_at(spark, exc.table, exc.snapshot_id)   # what on_rewrite="full" does
    """

    def __init__(
        self, detail: str, *, table: str = "", after_snapshot_id: int | None = None, snapshot_id: int = -1
    ) -> None:
        super().__init__(detail)
        self.table, self.after_snapshot_id, self.snapshot_id = table, after_snapshot_id, snapshot_id


class UnsupportedTable(ValueError):
    """A table this catalog cannot read exactly (Delta: deletion vectors, column mapping, partition columns)."""


CommitKind = Literal["write", "schema", "restore", "other"]


@dataclass(frozen=True)
class CommitRecord:
    """One commit of a table as the job logic needs to see it: who made it, for which barrier, and whether it
    brought back an earlier snapshot. Formats fill it from their own commit metadata.

    Attributes:
        snapshot_id: the snapshot the commit created.
        kind: "write" (data changed: append, overwrite, merge, ...), "schema" (only the schema changed, e.g.
            columns added ahead of a `schema="merge"` write), "restore" (the table holds the data of
            `restored_snapshot_id` again) or "other" (anything else: compaction, properties, ...).
        job_id: the job that made it (the `app_id` of a tagged write, the job of an undo), or None.
        barrier: the barrier a tagged "write" or "schema" commit was made for, or None.
        restored_snapshot_id: for "restore": the snapshot whose data the table holds again; None when the
            restore emptied the table (undoing everything when the baseline is "no snapshot").

    Example:
        undone = [c for c in catalog.commits_after("lake.mart.x", 4) if c.kind == "restore"]
    """

    snapshot_id: int
    kind: CommitKind
    job_id: str | None = None
    barrier: int | None = None
    restored_snapshot_id: int | None = None


@runtime_checkable
class Catalog(Protocol):
    """Where tables live and how their snapshots are read, written and tagged with barriers.

    A snapshot id is the format's own version number (Delta version, Paimon snapshot id, Iceberg snapshot
    *sequence number*: Iceberg's own snapshot ids are random); ids of one table grow with every commit. A
    format implements "exactly once per barrier" by storing `(app_id, barrier)` atomically with the commit
    (Delta app transaction, Paimon commit user and identifier, Iceberg snapshot summary properties) and finding
    it again in `committed_snapshot` / `commits_after`.

    What `EtlJob` needs from a format, beyond reads and writes (design rule 11, "no row lands twice across
    an abort"): before writing a sink for barrier b, the job asks `commits_after(sink, baseline)` (baseline:
    the snapshot MetaService holds for the sink before b) and decides in format-agnostic code
    (`spark_client.job.plan_sink`): commits of this job for other barriers (aborted attempts) are undone with
    `restore(sink, baseline)`; a commit of this job for b is reused; anything else is an error. A format
    must therefore (1) tag every write with `(app_id, barrier)` atomically with the commit, (2) report its
    restores as `CommitRecord(kind="restore", restored_snapshot_id=...)`, and (3) implement
    `restore(table, None)` as "no rows" (the state before the job's first commit). A format whose restore
    rewinds its history (Iceberg moves its current snapshot back, Paimon rolls back) simply no longer lists the
    undone commits in `commits_after`; one whose restore writes a new snapshot (Delta) lists that as a restore.

    A catalog holding tables of several formats (`RoutingCatalog`) also has `format_of(table)`; the job layer
    registers each table with `format_of(table)` when the catalog has it, else `format`.

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
        """Rows of an append-only `table` added after `after_snapshot_id` up to `snapshot_id` (None: all).

        Raises `NotAppendOnly` (with `table`, `after_snapshot_id`, `snapshot_id` set) when a commit in between
        removed or rewrote rows; `Inputs.changes(on_rewrite=...)` decides what the job does then."""
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
        mode: WriteMode | ModeName,
        app_id: str | None = None,
        barrier: int | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> int:
        """Apply `df` to `table` with `mode` in one data commit, tagged with `(app_id, barrier)` when given;
        returns the new snapshot id. A tagged write whose commit is already in the table returns that snapshot
        and writes nothing. Delta, Iceberg and Paimon share one implementation of the modes, schema policies
        and errors (`spark_client.catalog._writes.SparkWrittenCatalog`).

        The modes (`spark_client.modes`) every format implements alike, all at Spark scale (executors read,
        join and write; the driver commits file lists and may collect only small things such as file names):
        `Append` adds rows; `Overwrite` replaces all rows; `ReplaceWhere(predicate)` replaces the rows where
        the predicate is true (NULL counts as false) and refuses data rows that do not match it (ValueError,
        nothing committed); `OverwritePartitions(columns)` replaces every row whose values in `columns`
        (NULL equal to NULL) occur in the data, on the column values (the table need not be partitioned);
        `Merge(keys, delete_column)` replaces rows whose keys occur in the data (SQL equality: NULL keys
        never match) and adds the others, a true `delete_column` deletes instead and is not stored; data with
        duplicate keys is refused (ValueError), and so is a `delete_column` that is not boolean; key, partition
        and delete columns the data lacks are ValueErrors too. Schema policies: "strict" (same columns and
        types, by name; `SchemaMismatch`), "merge" (new columns are added, nullable; missing ones are written
        as NULL; types must match) and "overwrite" (only with `Overwrite`: the data's schema replaces the
        table's). A schema change needed by "merge" may be its own commit before the data commit, tagged like
        it (`CommitRecord(kind="schema")`)."""
        ...

    def restore(self, table: str, snapshot_id: int | None, *, metadata: Mapping[str, str] | None = None) -> int:
        """Make `table` hold the data (and schema) of `snapshot_id` again; `None`: no rows. Returns the snapshot id
        that now holds it: a new snapshot (Delta RESTORE; reported by `commits_after` as `kind="restore"` with
        `restored_snapshot_id == snapshot_id`, carrying `metadata`), or `snapshot_id` itself where the format
        rewinds (Iceberg, Paimon: the undone commits leave `commits_after` and `committed_snapshot`)."""
        ...

    def commits_after(self, table: str, snapshot_id: int | None) -> list[CommitRecord]:
        """The commits of `table` newer than `snapshot_id` (every commit when None), newest first; empty when
        the table does not exist. Raises ValueError when the table's newest snapshot is older than
        `snapshot_id` (storage lost commits MetaService knows of)."""
        ...

    def vacuum(
        self,
        table: str,
        client: MetaServiceClient,
        *,
        min_orphan_age_seconds: float = 3600,
        dry_run: bool = False,
    ) -> list[str]:
        """Remove what no protected snapshot of `table` needs (MetaService's retention answer); returns what
        was (or would be) removed."""
        ...

    def committed_snapshot(self, table: str, *, app_id: str, barrier: int) -> int | None:
        """The snapshot `app_id` already committed for `barrier` (a run that crashed before reporting it)."""
        ...

    def arrow_dataset(self, table: str, snapshot_id: int) -> pads.Dataset:
        """`table` exactly as of `snapshot_id` as a pyarrow Dataset, read without Spark by the format's own
        library (DuckDB, Polars, pandas read it; `consistent_arrow` opens every table this way)."""
        ...
