"""What the Iceberg and Paimon catalogs share: table names, schema rules, and copy-on-write plans of the modes.

A mode other than `Append` is planned here, in Spark, as *which files of the current snapshot go* and *which
rows are written as new files*: the executors find the files that hold affected rows (a semi join on the
file's path), re-read only those, keep their unaffected rows and add the new ones. The driver receives file
paths, never rows, and each format commits the plan as one snapshot (removals and additions together).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from spark_client.catalog.base import CommitRecord, SchemaMismatch
from spark_client.modes import Append, Merge, ModeName, Overwrite, OverwritePartitions, ReplaceWhere, WriteMode

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

BARRIER_KEY, JOB_KEY, WRITE_KEY = "metaservice.barrier", "metaservice.job_id", "metaservice.write_id"
SCHEMA_KEY = "metaservice.schema_for_barrier"  # a schema-only commit made ahead of a tagged write
RESTORES_KEY = "metaservice.restores"  # a commit that makes the table hold an earlier snapshot ("none": empty)
RESERVED_KEYS = frozenset({BARRIER_KEY, JOB_KEY, WRITE_KEY, SCHEMA_KEY, RESTORES_KEY})
NO_SUCCESS_MARKER = "mapreduce.fileoutputcommitter.marksuccessfuljobs"
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,127}")
_FILE = "_metaservice_file"
_MODES = (Append, Overwrite, ReplaceWhere, OverwritePartitions, Merge)


_GLOB = re.compile(r"[*?\[\]{}\\]")


def local_root(root: str | os.PathLike[str], *, what: str) -> str:
    """The absolute path of a lake root on the local file system, refusing what Spark could not read back.

    Spark expands `* ? [ ] { } \\` in the file names it is given as patterns, so a table under a directory named,
    say, `lake[prod]` would write fine and then read as "path does not exist" (or, with globbing switched off,
    some files twice). Refused up front, before anything is written.

    Raises:
        ValueError: a URI (`s3://…`) or a path with one of those characters.
    """
    path = os.fspath(root)
    if "://" in path:
        raise ValueError(f"only local directories are supported as {what} so far, got {path!r}")
    if found := sorted(set(_GLOB.findall(path))):
        raise ValueError(
            f"{what} {path!r} contains {' '.join(found)}: Spark reads table files by name and expands these as "
            "patterns, so the tables could not be read back; choose a directory without them"
        )
    return os.path.abspath(path)


def split_name(table: str) -> tuple[str, str, str]:
    """`catalog.database.table` → its three parts; ValueError for a malformed name."""
    parts = table.split(".")
    if len(parts) != 3 or not all(_PART.fullmatch(p) for p in parts):
        raise ValueError(f"table names are catalog.database.table with parts {_PART.pattern}: {table!r}")
    return parts[0], parts[1], parts[2]


def as_mode(mode: WriteMode | ModeName) -> WriteMode:
    """The mode object for a mode or its short name ("append", "overwrite")."""
    if isinstance(mode, str):
        named: dict[str, WriteMode] = {"append": Append(), "overwrite": Overwrite()}
        if mode in named:
            return named[mode]
    elif isinstance(mode, _MODES):
        if mode.schema == "overwrite" and not isinstance(mode, Overwrite):
            raise ValueError(f"schema='overwrite' needs a whole-table Overwrite, not {type(mode).__name__}")
        return mode
    raise ValueError(
        f"mode must be 'append', 'overwrite' or one of {[m.__name__ for m in _MODES]} from spark_client.modes, "
        f"got {mode!r}"
    )


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


def resolve_schema(table: str, current: StructType, data: StructType, mode: WriteMode) -> StructType:
    """The table's schema after writing `data` with `mode`, or SchemaMismatch (nothing written).

    Columns are matched by name. `strict`: the same columns with the same types. `merge`: new columns are
    appended to the table's, existing ones keep their types (data may lack some: they are null). `overwrite`
    (whole-table `Overwrite` only): the data's schema replaces the table's.
    """
    from pyspark.sql.types import StructType

    if mode.schema == "overwrite":
        return data
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
    return StructType([*current.fields, *added])


@dataclass(frozen=True)
class Rewrite:
    """A mode planned against one snapshot: the files it removes and the rows it writes as new files.

    Attributes:
        removed: paths (as the format lists them) of current files that the commit removes.
        data: the rows to write, in the table's column order.
    """

    removed: tuple[str, ...]
    data: DataFrame


def plan_rewrite(
    spark: SparkSession, df: DataFrame, mode: WriteMode, *, files: Sequence[str], schema: StructType
) -> Rewrite:
    """Plan `mode` against the current `files` of a table whose schema (after the write) is `schema`."""
    from pyspark.sql import functions as F

    rows = aligned(df, schema, mode)
    if isinstance(mode, Append):
        return Rewrite((), rows)
    if isinstance(mode, Overwrite):
        return Rewrite(tuple(files), rows)
    if isinstance(mode, ReplaceWhere):
        outside = F.expr(f"NOT coalesce(({mode.predicate}), false)")
        if df.filter(outside).limit(1).count():
            raise ValueError(f"every row written with ReplaceWhere must match its predicate {mode.predicate!r}")
        affected = _files_where(spark, files, schema, lambda current: current.filter(F.expr(mode.predicate)))
        kept = _read(spark, affected, schema).filter(outside)
        return Rewrite(tuple(affected.values()), kept.unionByName(rows))
    if isinstance(mode, OverwritePartitions):
        columns = _columns(mode.columns, df, schema, "OverwritePartitions")
        keys = df.select(*columns).distinct()
        on = _null_safe(columns, keys)
        affected = _files_where(spark, files, schema, lambda current: current.join(keys, on(current), "left_semi"))
        older = _read(spark, affected, schema)
        kept = older.join(keys, on(older), "left_anti")
        return Rewrite(tuple(affected.values()), kept.unionByName(rows))
    assert isinstance(mode, Merge)
    columns = _columns(mode.keys, df, schema, "Merge")
    if mode.delete_column is not None and mode.delete_column not in df.columns:
        raise ValueError(f"Merge delete_column {mode.delete_column!r} is not a column of the data")
    if df.groupBy(*columns).count().filter("count > 1").limit(1).count():
        raise ValueError(f"the data for Merge has several rows with the same keys {list(columns)}")
    keys = df.select(*columns)
    affected = _files_where(spark, files, schema, lambda current: current.join(keys, list(columns), "left_semi"))
    kept = _read(spark, affected, schema).join(keys, list(columns), "left_anti")
    upserts = df if mode.delete_column is None else df.filter(~F.coalesce(F.col(mode.delete_column), F.lit(False)))
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


def frame(spark: SparkSession, schema: StructType, files: Sequence[str]) -> DataFrame:
    """Spark's parquet reader over exactly `files`, columns by name (an empty frame for no files)."""
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*files)


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


def written_files(staging: str) -> list[str]:
    """The non-empty parquet files Spark wrote into `staging`; checksums and empty files are removed."""
    return list(written_row_counts(staging))


def written_row_counts(staging: str) -> dict[str, int]:
    """The non-empty parquet files Spark wrote into `staging` with their row counts (from the footers), in name
    order; checksums, `_SUCCESS` and empty files are removed, and so is `staging` when nothing is left."""
    import pyarrow.parquet as pq

    if not os.path.isdir(staging):
        return {}
    kept = {}
    for entry in sorted(os.scandir(staging), key=lambda e: e.name):
        rows = pq.read_metadata(entry.path).num_rows if entry.name.endswith(".parquet") else 0
        if rows == 0:
            os.remove(entry.path)  # .crc checksums, _SUCCESS, the one empty file Spark writes for no rows
        else:
            kept[entry.path] = rows
    if not kept:
        os.rmdir(staging)
    return kept


def local_path(uri: str) -> str:
    """A local file's path from a path or `file:` URI (as Spark's `_metadata.file_path` reports it)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return os.path.normpath(unquote(parsed.path))
    return uri


def _columns(columns: Sequence[str], df: DataFrame, schema: StructType, mode: str) -> list[str]:
    if not columns:
        raise ValueError(f"{mode} needs at least one column")
    missing = sorted((set(columns) - set(df.columns)) | (set(columns) - set(schema.fieldNames())))
    if missing:
        raise ValueError(f"{mode} columns {missing} are not columns of both the data and the table")
    return list(columns)


def _null_safe(columns: Sequence[str], keys: DataFrame) -> Callable[[DataFrame], Column]:
    from functools import reduce

    def on(rows: DataFrame) -> Column:
        return reduce(lambda a, b: a & b, [rows[c].eqNullSafe(keys[c]) for c in columns])

    return on


def _read(spark: SparkSession, files: Mapping[str, str], schema: StructType) -> DataFrame:
    return frame(spark, schema, sorted(files.values()))


def _files_where(
    spark: SparkSession, files: Sequence[str], schema: StructType, select: Callable[[DataFrame], DataFrame]
) -> dict[str, str]:
    """The files (local path → path as listed) holding a row that `select` keeps: only file names come back."""
    if not files:
        return {}
    from pyspark.sql import functions as F

    listed = {local_path(f): f for f in files}
    current = spark.read.schema(schema).parquet(*files).withColumn(_FILE, F.col("_metadata.file_path"))
    hits = select(current).select(_FILE).distinct().collect()
    return {local_path(r[0]): listed[local_path(r[0])] for r in hits}


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
