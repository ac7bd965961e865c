"""The write path every format shares: table names, the tag, schema rules, and the plans of the write modes.

`SparkWrittenCatalog.write` is the one implementation of `Catalog.write` for Delta, Iceberg and Paimon. It
checks the mode and the data, resolves the schema, finds an earlier commit of the same tag, and plans the mode
in Spark; a format supplies only its steps (`_open`, `_tagged_snapshot`, `_table_schema`, `_live_files`,
`_prepare`, `_write_files`, `_commit`).

A mode other than `Append` and `Overwrite` is planned here, in Spark, as *which files of the current snapshot
go* and *which rows are written as new files*: the executors find the files that hold affected rows (a semi
join on the file's path), re-read only those, keep their unaffected rows and add the new ones. The driver
receives file paths, never rows, and each format commits the plan as one snapshot (removals and additions
together). `Overwrite` removes every file the table holds when the format commits (the format lists them at
commit time, so a concurrent append is never lost silently by a stale list).
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from spark_client import _failpoints
from spark_client.catalog import _retention
from spark_client.catalog._lake import LOCAL, Files, LakeRoot
from spark_client.catalog.base import CommitRecord, SchemaMismatch
from spark_client.modes import Append, Merge, ModeName, Overwrite, OverwritePartitions, ReplaceWhere, WriteMode, as_mode

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

    from spark_client._http import MetaServiceClient

logger = logging.getLogger("spark_client.catalog")

BARRIER_KEY, JOB_KEY, WRITE_KEY = "metaservice.barrier", "metaservice.job_id", "metaservice.write_id"
SCHEMA_KEY = "metaservice.schema_for_barrier"  # a schema-only commit made ahead of a tagged write
RESTORES_KEY = "metaservice.restores"  # a commit that makes the table hold an earlier snapshot ("none": empty)
RESERVED_KEYS = frozenset({BARRIER_KEY, JOB_KEY, WRITE_KEY, SCHEMA_KEY, RESTORES_KEY})
NO_SUCCESS_MARKER = "mapreduce.fileoutputcommitter.marksuccessfuljobs"
# Spark's save mode for a fresh directory: "error" (= "errorifexists"), the one spelling Spark Connect accepts.
NEW_DIRECTORY = "error"
# Spark type names no format here stores (Delta, Iceberg and Paimon have no type for them).
UNSTORABLE = frozenset(
    {"void", "interval", "daytimeinterval", "yearmonthinterval", "time", "variant", "geometry", "geography"}
    | {"char", "varchar"}
)
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,127}")
_FILE = "_metaservice_file"

H = TypeVar("H")  # a format's handle of an open table (DeltaTable, pyiceberg Table, Paimon FileStoreTable)
F = TypeVar("F")  # a format's description of one data file (what its commit needs to remove it)
S = TypeVar("S")  # what a format's file writing hands to its commit (add actions, paths, commit messages)


def split_name(table: str) -> tuple[str, str, str]:
    """`catalog.database.table` → its three parts; ValueError for a malformed name."""
    parts = table.split(".")
    if len(parts) != 3 or not all(_PART.fullmatch(p) for p in parts):
        raise ValueError(f"table names are catalog.database.table with parts {_PART.pattern}: {table!r}")
    return parts[0], parts[1], parts[2]


def check_tag(app_id: str | None, barrier: int | None, metadata: Mapping[str, str] | None) -> None:
    """The tag and the extra commit properties a write may carry."""
    if (app_id is None) != (barrier is None):
        raise ValueError("app_id and barrier tag a commit together: give both or neither")
    if reserved := sorted(RESERVED_KEYS & set(metadata or {})):
        raise ValueError(f"commit metadata keys {reserved} are set by the catalog")


def commit_properties(
    write_id: str, app_id: str | None, barrier: int | None, metadata: Mapping[str, str] | None
) -> dict[str, str]:
    """Snapshot properties of one commit: the caller's metadata, the write id and the barrier tag."""
    properties = {**(metadata or {}), WRITE_KEY: write_id}
    if app_id is not None and barrier is not None:
        properties.update({BARRIER_KEY: str(barrier), JOB_KEY: app_id})
    return properties


def schema_properties(app_id: str | None, barrier: int | None, metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Properties of a schema-only commit made ahead of a write (tagged with the write's barrier)."""
    tags = {SCHEMA_KEY: str(barrier), JOB_KEY: app_id} if app_id is not None and barrier is not None else {}
    return {**(metadata or {}), **tags}


def check_columns(table: str, df: DataFrame, mode: WriteMode) -> None:
    """The columns a mode names (keys, partition columns, the delete column) are columns of the data, and a
    `Merge` delete column is boolean; ValueError naming the table otherwise (before anything is read)."""
    from pyspark.sql.types import BooleanType

    needed: tuple[str, ...] = ()
    if isinstance(mode, Merge):
        needed = mode.keys + ((mode.delete_column,) if mode.delete_column else ())
    elif isinstance(mode, OverwritePartitions):
        needed = mode.columns
    if missing := [c for c in needed if c not in df.columns]:
        raise ValueError(
            f"{type(mode).__name__} on {table!r} names columns {missing} the data does not have (columns: {df.columns})"
        )
    if isinstance(mode, Merge) and mode.delete_column:
        kind = df.schema[mode.delete_column].dataType
        if not isinstance(kind, BooleanType):
            raise ValueError(
                f"Merge on {table!r}: delete_column {mode.delete_column!r} must be boolean, it is {kind.simpleString()}"
            )


def data_schema(
    df: DataFrame, mode: WriteMode, *, table: str, unstorable: frozenset[str], format_name: str
) -> StructType:
    """The schema the rows of `df` are stored with: every level nullable (tables are created that way), a
    `Merge` delete column left out; ValueError for a type the format lacks."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType, UserDefinedType

    schema = df.schema
    if isinstance(mode, Merge) and mode.delete_column is not None:
        schema = StructType([f for f in schema.fields if f.name != mode.delete_column])

    def relax(dt: DataType, where: str) -> DataType:
        if isinstance(dt, UserDefinedType):
            return relax(dt.sqlType(), where)
        if isinstance(dt, StructType):
            return StructType(
                [StructField(f.name, relax(f.dataType, f"{where}.{f.name}"), True, f.metadata) for f in dt.fields]
            )
        if isinstance(dt, ArrayType):
            return ArrayType(relax(dt.elementType, f"{where}[]"), True)
        if isinstance(dt, MapType):
            return MapType(relax(dt.keyType, f"{where}{{key}}"), relax(dt.valueType, f"{where}{{value}}"), True)
        if dt.typeName() in unstorable:
            raise ValueError(
                f"column {where.lstrip('.')} of the data for {table!r} has type {dt.simpleString()}, "
                f"which {format_name} table cannot store"
            )
        return dt

    relaxed = relax(schema, "")
    assert isinstance(relaxed, StructType)
    return relaxed


def resolve_schema(
    table: str, current: StructType, data: StructType, mode: WriteMode
) -> tuple[StructType, list[StructField]]:
    """The table's schema after writing `data` with `mode`, and the columns it adds; SchemaMismatch (nothing
    written) when the mode's schema policy forbids the difference.

    Columns are matched by name. `strict`: the same columns with the same types. `merge`: new columns are
    appended to the table's, existing ones keep their types (data may lack some: they are null). `overwrite`
    (whole-table `Overwrite` only): the data's schema replaces the table's.
    """
    from pyspark.sql.types import StructType

    if mode.schema == "overwrite":
        return data, []
    want = {f.name: f.dataType.simpleString() for f in current.fields}
    got = {f.name: f.dataType.simpleString() for f in data.fields}
    names = sorted(want.keys() | got.keys()) if mode.schema == "strict" else sorted(want.keys() & got.keys())
    differing = [
        f"{name}: table {want.get(name, 'missing')}, data {got.get(name, 'missing')}"
        for name in names
        if want.get(name) != got.get(name)
    ]
    if differing:
        raise SchemaMismatch(table, differing)
    added = [f for f in data.fields if f.name not in want]
    return StructType([*current.fields, *added]), added


DUPLICATE_SAMPLE = 5  # duplicate Merge keys a DuplicateKeys error carries


class DuplicateKeys(ValueError):
    """A `Merge` whose data holds a key more than once (a `ValueError`, as `Catalog.write` promises). It carries the
    keys and up to `DUPLICATE_SAMPLE` of the duplicates with their row counts, so that a job turns it into its own
    `DuplicateMergeKeys` without grouping the data a second time."""

    def __init__(self, message: str, *, table: str, keys: tuple[str, ...], sample: list[dict[str, object]]) -> None:
        super().__init__(message)
        self.table, self.keys, self.sample = table, keys, sample


@dataclass(frozen=True)
class Rewrite:
    """A mode planned against one snapshot: the files it removes and the rows it writes as new files.

    Attributes:
        removed: paths (keys of the format's file listing) of current files that the commit removes.
        data: the rows to write, in the table's column order.
    """

    removed: tuple[str, ...]
    data: DataFrame


def plan_rewrite(
    spark: SparkSession,
    df: DataFrame,
    mode: WriteMode,
    *,
    table: str,
    files: Sequence[str],
    schema: StructType,
    root: LakeRoot = LOCAL,
) -> Rewrite:
    """Plan `mode` against the current `files` of `table` (paths in the driver's form under `root`, the local
    file system by default), whose schema (after the write) is `schema`.

    The data checks run here, before anything is written: rows outside a `ReplaceWhere` predicate and duplicate
    `Merge` keys are refused (ValueError naming the table). Each check is one small Spark job (`limit`).
    """
    from pyspark.sql import functions as F

    rows = aligned(df, schema, mode)
    if isinstance(mode, Append):
        return Rewrite((), rows)
    if isinstance(mode, Overwrite):
        return Rewrite((), rows)  # the format's commit removes every file the table holds then
    if isinstance(mode, ReplaceWhere):
        outside = F.expr(f"NOT coalesce(({mode.predicate}), false)")
        if df.filter(outside).limit(1).count():
            raise ValueError(
                f"ReplaceWhere on {table!r}: the data holds rows for which {mode.predicate!r} is not true; every "
                "row written must match the predicate (nothing was written)"
            )
        affected = _files_where(spark, root, files, schema, lambda current: current.filter(F.expr(mode.predicate)))
        if not affected:
            return Rewrite((), rows)
        kept = _read(spark, root, affected, schema).filter(outside)
        return Rewrite(tuple(affected.values()), kept.unionByName(rows))
    if isinstance(mode, OverwritePartitions):
        columns = list(mode.columns)
        keys = df.select(*[F.col(f"`{c}`") for c in columns]).distinct()
        on = _null_safe(columns, keys)
        affected = _files_where(
            spark, root, files, schema, lambda current: current.join(keys, on(current), "left_semi")
        )
        if not affected:
            return Rewrite((), rows)
        older = _read(spark, root, affected, schema)
        kept = older.join(keys, on(older), "left_anti")
        return Rewrite(tuple(affected.values()), kept.unionByName(rows))
    assert isinstance(mode, Merge)
    columns = list(mode.keys)
    duplicate = df.groupBy(*columns).count().filter(F.col("count") > 1).limit(DUPLICATE_SAMPLE).collect()
    if duplicate:
        sample = [{k: row[k] for k in columns} | {"rows": row["count"]} for row in duplicate]
        key = {k: duplicate[0][k] for k in columns}
        raise DuplicateKeys(
            f"Merge into {table!r}: the data holds more than one row for key {key}; each key may occur once "
            "(deduplicate before returning it, nothing was written)",
            table=table,
            keys=tuple(columns),
            sample=sample,
        )
    keys = df.select(*[F.col(f"`{k}`") for k in columns]).distinct()
    # SQL equality on the keys, as Delta MERGE: a NULL key never matches
    affected = _files_where(spark, root, files, schema, lambda current: current.join(keys, columns, "left_semi"))
    upserts = df if mode.delete_column is None else df.filter(~F.coalesce(F.col(mode.delete_column), F.lit(False)))
    if not affected:  # inserts only: no old row to keep, and no join of the keys with nothing to run
        return Rewrite((), aligned(upserts, schema, mode))
    kept = _read(spark, root, affected, schema).join(keys, columns, "left_anti")
    return Rewrite(tuple(affected.values()), kept.unionByName(aligned(upserts, schema, mode)))


def aligned(df: DataFrame, schema: StructType, mode: WriteMode | None = None) -> DataFrame:
    """`df` with exactly the table's columns in its order (columns the data lacks are null); `df` itself when it
    has them already (a projection costs a round trip to the JVM and an analysis pass on every write)."""
    from pyspark.sql import functions as F

    drop = {mode.delete_column} if isinstance(mode, Merge) and mode.delete_column else set()
    if df.columns == [f.name for f in schema.fields] and not drop & set(df.columns):
        return df
    present = {c for c in df.columns if c not in drop}
    return df.select(
        *[
            F.col(f"`{f.name}`") if f.name in present else F.lit(None).cast(f.dataType).alias(f.name)
            for f in schema.fields
        ]
    )


def frame(spark: SparkSession, schema: StructType, files: Sequence[str], root: LakeRoot | None = None) -> DataFrame:
    """Spark's parquet reader over exactly `files` (paths in the driver's form under `root`, given to Spark as
    `root.spark_path` names them), columns by name (an empty frame for no files)."""
    if not files:
        return spark.createDataFrame([], schema)
    if root is not None and not root.is_local:
        files = [root.spark_path(f) for f in files]
    return spark.read.schema(schema).parquet(*files)


class SparkWrittenCatalog(ABC, Generic[H, F, S]):
    """`Catalog.write` and `append` for a format whose data files Spark writes and whose driver commits them.

    The modes, the schema policies, the tag and every error are this class's; a format supplies its table
    handle (`_open`), what it finds of an earlier commit of a tag (`_tagged_snapshot`), the table's schema and
    its data files (`_table_schema`, `_live_files`), what it does before the data is written (`_prepare`:
    create the table, commit added columns), how Spark's files are written and described (`_write_files`) and
    the one commit (`_commit`).
    """

    format: ClassVar[str]
    _format_name: ClassVar[str]  # for errors: "a Delta", "an Iceberg", ...
    _lake: LakeRoot  # where the tables live, set by the format's constructor
    storage_options: dict[str, str]  # credentials, endpoint, region: in the format library's own keys
    _unstorable: ClassVar[frozenset[str]] = UNSTORABLE
    _commit_failpoint: ClassVar[str] = "after_table_commit"

    @abstractmethod
    def location(self, table: str) -> str:
        """The storage location of `table`; ValueError for a malformed name."""

    def append(self, spark: SparkSession, df: DataFrame, table: str) -> int:
        """Commit `df` as new rows of `table`, untagged (root tables, ingestion, tests); returns the snapshot id.

        Raises:
            SchemaMismatch: the DataFrame's schema differs from the table's.

        Example:
            catalog.append(spark, spark.createDataFrame([(1, "a")], "id long, name string"), "lake.raw.orders")
        """
        return self.write(spark, df, table, mode="append")

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
        """Apply `df` to `table` with `mode` in one data commit (see `Catalog.write` for the modes and schema
        policies, alike in every format); returns the snapshot id holding the data.

        Spark's executors write the data files (and run the checks and the copy-on-write plans); the driver
        commits the files the write adds and those it removes as one snapshot, tagged with `(app_id, barrier)`
        when given. A tagged write whose commit the table already holds returns that snapshot and writes
        nothing. A `schema="merge"` write that adds columns may first make a schema-only change (Delta: a
        version tagged `metaservice.schema_for_barrier`).

        Args:
            spark: the session running the write.
            df: the rows.
            table: `catalog.database.table`; created by the first write.
            mode: a `spark_client.modes` mode or "append" / "overwrite".
            app_id: the job id the commit is tagged with.
            barrier: the barrier the commit is tagged with; given together with `app_id`.
            metadata: more commit properties (`metaservice.barrier`, `.job_id`, `.write_id`, … are reserved).

        Returns:
            The snapshot id holding the data.

        Raises:
            SchemaMismatch: the data's schema does not fit the table's under the mode's schema policy.
            UnsupportedTable: a table this catalog cannot write exactly.
            ValueError: bad arguments (an unknown mode, a tag without its barrier, reserved metadata keys), a
                type the format cannot store, key/partition/delete columns the data lacks, a delete column that
                is not boolean, rows outside a `ReplaceWhere` predicate, duplicate `Merge` keys. Nothing is
                written in any of these cases.
            TypeError: `mode` is neither a mode object nor a shorthand.

        Example:
            from spark_client.modes import Merge
            snapshot = catalog.write(spark, df, "lake.mart.customers", mode=Merge(keys=("customer_id",)),
                                     app_id="dims", barrier=1042)
        """
        write_mode = as_mode(mode, sink=table)
        check_tag(app_id, barrier, metadata)
        self.location(table)  # the name, checked before anything is read
        self._check_mode(table, write_mode)
        check_columns(table, df, write_mode)
        stored = data_schema(df, write_mode, table=table, unstorable=self._unstorable, format_name=self._format_name)
        handle = self._open(table)
        schema = stored
        added: list[StructField] = []
        files: Mapping[str, F] = {}
        if handle is not None:
            if app_id is not None and barrier is not None:
                done = self._tagged_snapshot(handle, app_id=app_id, barrier=barrier)
                if done is not None:
                    logger.info("%s holds %s's barrier %d already: snapshot %d", table, app_id, barrier, done)
                    return done
            self._check_writable(table, handle)
            schema, added = resolve_schema(table, self._table_schema(handle), stored, write_mode)
            if isinstance(write_mode, ReplaceWhere | OverwritePartitions | Merge):
                files = self._live_files(table, handle)
        plan = plan_rewrite(spark, df, write_mode, table=table, files=sorted(files), schema=schema, root=self._lake)
        write = PendingWrite(
            spark, table, write_mode, schema, tuple(added), uuid.uuid4().hex, app_id, barrier, dict(metadata or {})
        )
        handle = self._prepare(write, handle)
        staged = self._write_files(write, handle, plan.data)
        _failpoints.hit("after_files_written")
        removed = [files[path] for path in plan.removed]
        snapshot = self._commit(write, handle, staged, removed)
        logger.debug(
            "%s: %s removed %d file(s) (write %s): snapshot %d",
            table,
            write_mode,
            len(removed),
            write.write_id,
            snapshot,
        )
        if app_id is not None:
            _failpoints.hit(self._commit_failpoint)
        return snapshot

    def vacuum(
        self,
        table: str,
        client: MetaServiceClient,
        *,
        min_orphan_age_seconds: float = 3600,
        dry_run: bool = False,
    ) -> list[str]:
        """Remove what no protected snapshot of `table` needs; returns the paths removed (or, with `dry_run`,
        that would be). The policy (`spark_client.catalog._retention`) is the same for every format: snapshots
        older than MetaService's oldest protected one (and the format's own protections) are expired, files only
        they referenced are deleted, and files no snapshot ever referenced only once older than
        `min_orphan_age_seconds` (a write in progress is never touched). A table that does not exist: nothing.

        Example:
            deleted = catalog.vacuum("lake.mart.orders_enriched", client)
        """
        newest = self.latest_snapshot(table)
        if newest is None:
            return []
        lowest = _retention.floor(client, table, newest, self._own_protected(table))
        storage = self._storage(table, lowest)
        doomed = _retention.doomed(storage, min_orphan_age_seconds=min_orphan_age_seconds)
        if not dry_run:
            _retention.apply(storage, doomed)
        return sorted(doomed)

    @abstractmethod
    def latest_snapshot(self, table: str) -> int | None:
        """The newest snapshot id of `table`, or None when there is none."""

    def _own_protected(self, table: str) -> int | None:
        """The oldest snapshot the format itself protects (beyond MetaService's answer), if any."""
        del table
        return None

    @abstractmethod
    def _storage(self, table: str, floor: int) -> _retention.Storage:
        """What the snapshots from `floor` on reference, what every snapshot references, what lies in storage,
        and how the format expires the snapshots below `floor` (see `_retention.Storage`)."""

    def _check_mode(self, table: str, mode: WriteMode) -> None:
        """Refuse a mode or schema policy the format cannot apply (ValueError); all are fine by default."""
        del table, mode

    def _check_writable(self, table: str, handle: H) -> None:
        """Refuse a table this catalog cannot write exactly (UnsupportedTable); all are fine by default."""
        del table, handle

    @abstractmethod
    def _open(self, table: str) -> H | None:
        """The table's handle at its newest snapshot, or None when it does not exist."""

    @abstractmethod
    def _tagged_snapshot(self, handle: H, *, app_id: str, barrier: int) -> int | None:
        """The live snapshot `app_id` committed for `barrier`, if any."""

    @abstractmethod
    def _table_schema(self, handle: H) -> StructType:
        """The table's current schema as Spark sees it."""

    @abstractmethod
    def _live_files(self, table: str, handle: H) -> Mapping[str, F]:
        """The data files of the current snapshot: path Spark reads it by → what the commit needs to remove it."""

    @abstractmethod
    def _prepare(self, write: PendingWrite, handle: H | None) -> H | None:
        """What comes before the data files: create the table, add the columns `write.added` (a schema-only
        commit with `write.schema_properties` where the format makes one). Returns the handle to write for."""

    @abstractmethod
    def _write_files(self, write: PendingWrite, handle: H | None, data: DataFrame) -> S:
        """Let Spark write `data` as new data files of the table into `_staging` (given to Spark as
        `self._lake.spark_path` names it); `_staged` describes them."""

    @abstractmethod
    def _staging(self, write: PendingWrite, handle: H | None) -> str:
        """The fresh directory (the driver's form) the data files of `write` are written into."""

    @abstractmethod
    def _staged(self, write: PendingWrite, handle: H | None, staging: str) -> S:
        """Describe the parquet files written into `staging` for the commit (driver side, through the format's
        file system: sizes, row counts and statistics from the footers); checksums and empty files are removed."""

    @abstractmethod
    def _commit(self, write: PendingWrite, handle: H | None, staged: S, removed: list[F]) -> int:
        """One snapshot adding the `staged` files and removing `removed` (every file the table holds when
        `write.replaces_all`), with `write.properties` and the tag; returns its snapshot id."""


@dataclass(frozen=True)
class PendingWrite:
    """One write on its way to its commit, as the format's steps see it.

    Attributes:
        spark: the session running it.
        table: the table written.
        mode: the write mode.
        schema: the table's schema after the commit.
        added: the columns a `schema="merge"` write adds to an existing table.
        write_id: this write's id (also in `properties`); names its data directory.
        app_id: the job of the tag, or None.
        barrier: the barrier of the tag, or None.
        metadata: the caller's extra commit properties.
    """

    spark: SparkSession
    table: str
    mode: WriteMode
    schema: StructType
    added: tuple[StructField, ...]
    write_id: str
    app_id: str | None
    barrier: int | None
    metadata: Mapping[str, str]

    @property
    def tag(self) -> tuple[str, int] | None:
        """`(app_id, barrier)`, or None for an untagged write."""
        return (self.app_id, self.barrier) if self.app_id is not None and self.barrier is not None else None

    @property
    def replaces_all(self) -> bool:
        """A whole-table `Overwrite`: the commit removes every file the table holds."""
        return isinstance(self.mode, Overwrite)

    @property
    def properties(self) -> dict[str, str]:
        """Properties of the data commit: the metadata, the write id and the tag."""
        return commit_properties(self.write_id, self.app_id, self.barrier, self.metadata)

    @property
    def schema_properties(self) -> dict[str, str]:
        """Properties of a schema-only commit made ahead of the data (tagged for the write's barrier)."""
        return schema_properties(self.app_id, self.barrier, self.metadata)


@contextmanager
def microsecond_timestamps(spark: SparkSession) -> Iterator[None]:
    """Spark writes timestamps as INT64 microseconds (Iceberg and Paimon readers reject INT96) while inside."""
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "TIMESTAMP_MICROS")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def written_row_counts(files: Files, staging: str) -> dict[str, int]:
    """The non-empty parquet files Spark wrote into `staging` with their row counts (from the footers), in name
    order; checksums, `_SUCCESS` and empty files are removed, and so is `staging` when nothing is left."""
    kept = {}
    for path in files.list_files(staging, recursive=False):
        rows = files.footer(path).num_rows if path.endswith(".parquet") else 0
        if rows == 0:
            files.delete(path)  # .crc checksums, _SUCCESS, the one empty file Spark writes for no rows
        else:
            kept[path] = rows
    if not kept and files.local and os.path.isdir(staging):
        files.remove_empty_directory(staging)
    return kept


def _null_safe(columns: Sequence[str], keys: DataFrame) -> Callable[[DataFrame], Column]:
    from functools import reduce

    def on(rows: DataFrame) -> Column:
        return reduce(lambda a, b: a & b, [rows[c].eqNullSafe(keys[c]) for c in columns])

    return on


def _read(spark: SparkSession, root: LakeRoot, files: Mapping[str, str], schema: StructType) -> DataFrame:
    return frame(spark, schema, sorted(files.values()), root)


def _files_where(
    spark: SparkSession,
    root: LakeRoot,
    files: Sequence[str],
    schema: StructType,
    select: Callable[[DataFrame], DataFrame],
) -> dict[str, str]:
    """The files (driver path → path as listed) holding a row that `select` keeps: only file names come back.
    Spark reports each file as a URI in its own scheme (`_metadata.file_path`); `root.driver_path` maps it back."""
    if not files:
        return {}
    from pyspark.sql import functions as F

    listed = {root.driver_path(f): f for f in files}
    current = frame(spark, schema, files, root).withColumn(_FILE, F.col("_metadata.file_path"))
    hits = select(current).select(_FILE).distinct().collect()
    return {root.driver_path(r[0]): listed[root.driver_path(r[0])] for r in hits}


def commit_record(snapshot_id: int, properties: Mapping[str, str] | None, *, row_neutral: bool) -> CommitRecord:
    """A commit as the job logic sees it (`CommitRecord`), from the properties our writes stamp on it;
    `row_neutral`: the format says the commit changed no rows (a compaction)."""
    tags = properties or {}
    job = tags.get(JOB_KEY)
    if tags.get(RESTORES_KEY) == "none":
        return CommitRecord(snapshot_id, "restore", job_id=job, restored_snapshot_id=None)
    if SCHEMA_KEY in tags:
        return CommitRecord(snapshot_id, "schema", job_id=job, barrier=_int_or_none(tags.get(SCHEMA_KEY)))
    if row_neutral:
        return CommitRecord(snapshot_id, "other", job_id=job)
    return CommitRecord(snapshot_id, "write", job_id=job, barrier=_int_or_none(tags.get(BARRIER_KEY)))


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, str) and value.lstrip("-").isdigit() else None
