"""Paimon tables written by Spark and committed by the driver through `pypaimon`.

No Paimon jars are needed in Spark. A Paimon append table's data files are plain parquet files; what Paimon
adds (row counts, statistics, levels, sequence numbers) lives in its manifests. So for the tables this catalog
creates (unpartitioned, bucket-unaware, parquet, no value statistics) **Spark's own parquet writer writes** the
files into a staging directory, the driver moves them into `bucket-0/` under Paimon's file names and describes
them exactly as pypaimon's writer would (row count from the footer, file size, empty statistics, sequence 0).
For any other table (partitioned, fixed buckets, statistics, external paths, row tracking, …) the executors
write instead: each Spark task streams its rows as Arrow batches (`mapInArrow`) into a pypaimon table writer,
which returns Paimon *commit messages* (file metadata); the executors then need `pypaimon` and
`spark_client`. Either way the driver commits one snapshot with Paimon's own exactly-once tag: **commit user =
job id, commit identifier = barrier** (what Flink's Paimon sink uses for checkpoints).

Snapshot ids are Paimon's (1, 2, 3, …). Rollback uses Paimon's `rollback_to` (later snapshots are deleted).
"""

from __future__ import annotations

import logging
import os
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_client.catalog import _retention, _writes
from spark_client.catalog._lake import LOCAL, Files, LakeRoot
from spark_client.catalog._writes import NEW_DIRECTORY, NO_SUCCESS_MARKER, PendingWrite, SparkWrittenCatalog
from spark_client.catalog.base import CommitRecord, NotAppendOnly, UnsupportedTable
from spark_client.modes import Append

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads
    from pypaimon.catalog.catalog import Catalog as PaimonNativeCatalog
    from pypaimon.manifest.schema.data_file_meta import DataFileMeta
    from pypaimon.snapshot.snapshot import Snapshot
    from pypaimon.table.file_store_table import FileStoreTable
    from pypaimon.write.commit_message import CommitMessage
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from spark_client.modes import WriteMode

logger = logging.getLogger("spark_client.catalog")

_TABLE_OPTIONS = {
    "bucket": "-1",  # append table, bucket-unaware: any number of writers, files placed by the writer
    "file.format": "parquet",  # Spark reads the data files directly
    "file.compression": "snappy",  # Spark's own codec (as Delta's and Iceberg's files): faster to write than zstd
    "snapshot.ignore-empty-commit": "false",  # every write is a snapshot, also an empty one (as in Delta)
}


# Spark writes a write's files into <table>/_staging/<write id>/; they move into bucket-0/ before the commit.
_STAGING_DIR = "_staging"
# Paimon's `file.compression` values that Spark's parquet writer writes as pyarrow does (others: pypaimon writes).
_SPARK_CODECS = {"none": "none", "snappy": "snappy", "zstd": "zstd", "gzip": "gzip"}

# `read_changes` reads the delta manifests of at most this many snapshots; a longer range compares full plans.
DELTA_SNAPSHOTS = 64


@dataclass(frozen=True)
class _File:
    """A data file of the current snapshot, with where it lives in Paimon's layout (for removing it)."""

    partition: tuple[Any, ...]
    bucket: int
    meta: DataFileMeta


class PaimonCatalog(SparkWrittenCatalog["FileStoreTable", _File, "list[CommitMessage]"]):
    """Paimon append tables under one root: `lake.sales.orders` lives at `<root>/lake/sales.db/orders`.

    Each first part of a name is a Paimon filesystem warehouse (`<root>/<catalog>`) with the usual
    `<database>.db/<table>` layout, so Flink, Spark with Paimon, or pypaimon open the same tables. The first
    write creates the table (unaware-bucket append table, parquet files, every column nullable) with the
    DataFrame's schema.

    Args:
        root: a local directory (created on the first write) or an object-store URI: `s3://bucket/lake` (Spark
            writes it as `s3a://`) or `gs://…` (pypaimon has no Azure file system).
        storage_options: pypaimon catalog options for an object store (`s3.endpoint`, `s3.access-key`,
            `s3.secret-key`, `s3.region`, `s3.path-style-access`, `gcs.project-id`, …); used by every driver-side
            commit, listing, vacuum and non-Spark read, and by Spark tasks that write through pypaimon.

    Example:
        catalog = PaimonCatalog("/data/lake")
        catalog = PaimonCatalog("s3://warehouse/lake", storage_options={"s3.region": "eu-west-1"})
        snapshot = catalog.append(spark, df, "lake.raw.orders")
        catalog.read_at(spark, "lake.raw.orders", snapshot).count()
    """

    format = "paimon"
    _format_name = "a Paimon"

    def __init__(self, root: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None) -> None:
        self._lake = LakeRoot.parse(root, what="a Paimon warehouse root", schemes=frozenset({"s3", "gs"}))
        self.root = self._lake.uri
        self.storage_options = dict(storage_options or {})
        self._catalogs: dict[str, PaimonNativeCatalog] = {}
        self._files: Files | None = None

    def __repr__(self) -> str:
        return f"PaimonCatalog({self.root!r})"

    def location(self, table: str) -> str:
        """The directory of `table`: `<root>/<catalog>/<database>.db/<table>`.

        Raises:
            ValueError: the name is not `catalog.database.table`.

        Example:
            PaimonCatalog("/data/lake").location("lake.sales.orders")   # "/data/lake/lake/sales.db/orders"
        """
        catalog, database, name = _writes.split_name(table)
        return self._lake.join(catalog, f"{database}.db", name)

    def _files_of(self, native: FileStoreTable) -> Files:
        """The table's files as the driver reaches them: the local file system, or pypaimon's own FileIO
        (`PyArrowFileIO`, with `storage_options`) for an object store."""
        if self._lake.is_local:
            return Files()
        if self._files is None:
            io = native.file_io
            self._files = Files(io.filesystem, io.to_filesystem_path)
        return self._files

    def paimon_table(self, table: str, *, snapshot_id: int | None = None) -> FileStoreTable:
        """The pypaimon table of `table` (at `snapshot_id` when given: Paimon time travel), for Paimon's own reader.

        Raises:
            ValueError: no such table, or no such snapshot.

        Example:
            t = catalog.paimon_table("lake.raw.orders", snapshot_id=3)
            rows = t.new_read_builder().new_read().to_arrow(t.new_read_builder().new_scan().plan().splits())
        """
        native = self._open(table)
        if native is None:
            raise ValueError(f"{table!r} does not exist in {self!r}")
        return native if snapshot_id is None else _travel(native, table, snapshot_id)

    def latest_snapshot(self, table: str) -> int | None:
        """The newest Paimon snapshot id of `table`; None when there is no table or no snapshot yet.

        Example:
            catalog.latest_snapshot("lake.raw.orders")   # e.g. 12
        """
        native = self._open(table)
        latest = None if native is None else native.snapshot_manager().get_latest_snapshot()
        return None if latest is None else latest.id

    def committed_snapshot(self, table: str, *, app_id: str, barrier: int) -> int | None:
        """The snapshot committed with commit user `app_id` and commit identifier `barrier`, if any.

        Returns:
            The snapshot id, or None when the job has no commit for `barrier` in `table` (snapshots a rollback
            removed do not count: Paimon deletes them).

        Example:
            snapshot = catalog.committed_snapshot("lake.mart.orders_enriched", app_id="enrich", barrier=1042)
        """
        native = self._open(table)
        return None if native is None else _tagged_snapshot(native, app_id=app_id, barrier=barrier)

    def read_at(self, spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
        """`table` exactly as of Paimon snapshot `snapshot_id`: Spark reads that snapshot's data files.

        Raises:
            ValueError: no such snapshot.
            UnsupportedTable: a primary-key table or one with deletion vectors (read it with `paimon_table`).

        Example:
            orders = catalog.read_at(spark, "lake.raw.orders", 12)
        """
        at = self.paimon_table(table, snapshot_id=snapshot_id)
        files = _current_files(at, table, lake=self._lake)
        return _writes.frame(spark, _spark_schema(_fields_at(at, snapshot_id)), sorted(files), self._lake)

    def read_changes(
        self, spark: SparkSession, table: str, *, after_snapshot_id: int | None, snapshot_id: int
    ) -> DataFrame:
        """Rows added after snapshot `after_snapshot_id` up to `snapshot_id` (all rows when it is None).

        Raises:
            NotAppendOnly: files of `after_snapshot_id` were removed in between (overwrite, copy-on-write).
            ValueError: `after_snapshot_id` is newer than `snapshot_id`, or a snapshot does not exist.

        Example:
            new = catalog.read_changes(spark, "lake.raw.orders", after_snapshot_id=11, snapshot_id=12)
        """
        if after_snapshot_id is None:
            return self.read_at(spark, table, snapshot_id)
        if after_snapshot_id > snapshot_id:
            raise ValueError(f"after_snapshot_id {after_snapshot_id} is newer than snapshot_id {snapshot_id}")
        native = self.paimon_table(table)
        for wanted in (after_snapshot_id, snapshot_id):
            _travel(native, table, wanted)  # ValueError: no such snapshot
        added, gone = _added_between(native, table, after_snapshot_id, snapshot_id, lake=self._lake)
        if gone:
            raise NotAppendOnly(
                f"{table!r} is not append-only between snapshots {after_snapshot_id} and {snapshot_id}: "
                f"{gone} file(s) were removed (overwritten); read it whole with read_at"
            )
        return _writes.frame(spark, _spark_schema(_fields_at(native, snapshot_id)), sorted(added), self._lake)

    def commits_after(self, table: str, snapshot_id: int | None) -> list[CommitRecord]:
        """The snapshots of `table` after `snapshot_id` (all when None), newest first, with their tags (a
        rollback deletes the later snapshots, so undone commits are not among them).

        Raises:
            ValueError: the table's newest snapshot is older than `snapshot_id`, or the table is gone although
                `snapshot_id` is given (storage lost commits MetaService knows of).

        Example:
            for commit in catalog.commits_after("lake.mart.orders_enriched", 4):
                print(commit.snapshot_id, commit.kind, commit.job_id, commit.barrier)
        """
        native = self._open(table)
        snapshots = None if native is None else native.snapshot_manager()
        latest = None if snapshots is None else snapshots.get_latest_snapshot()
        if snapshot_id is not None and (latest is None or latest.id < snapshot_id):
            raise ValueError(
                f"{table!r} is at snapshot {None if latest is None else latest.id} in storage, older than snapshot "
                f"{snapshot_id} that MetaService holds for it: the table was replaced or lost commits; restore it or "
                "roll the pipeline back"
            )
        if snapshots is None or latest is None:
            return []
        records = []
        for number in range(latest.id, 0 if snapshot_id is None else snapshot_id, -1):
            snapshot = snapshots.get_snapshot_by_id(number)
            if snapshot is None:
                break  # expired
            neutral = snapshot.commit_kind == "COMPACT"
            records.append(_writes.commit_record(number, snapshot.properties, row_neutral=neutral))
        return records

    def restore(self, table: str, snapshot_id: int | None, *, metadata: Mapping[str, str] | None = None) -> int:
        """Roll `table` back to snapshot `snapshot_id` with Paimon's `rollback_to`; returns `snapshot_id`.

        Paimon deletes the later snapshots (their files become unreferenced; `vacuum` removes them), so the
        table's newest snapshot is `snapshot_id` again and the next commit is `snapshot_id + 1`. `metadata`
        is only logged: a rollback writes no snapshot to carry it.

        `snapshot_id=None` empties the table instead (a new snapshot removing every file, tagged
        `metaservice.restores = "none"`): the state before a job's first commit, when an aborted attempt created
        the table. It returns that snapshot's id.

        Example:
            catalog.restore("lake.mart.orders_enriched", 4)   # 4
        """
        native = self.paimon_table(table)
        if snapshot_id is None:
            write_id = uuid.uuid4().hex
            properties = {**(metadata or {}), _writes.RESTORES_KEY: "none", _writes.WRITE_KEY: write_id}
            removals = _removals(_current_files(native, table, lake=self._lake).values())
            return _commit(native, f"metaservice-{write_id}", _batch_identifier(), removals, properties)
        latest = native.snapshot_manager().get_latest_snapshot()
        if latest is None or latest.id != snapshot_id:
            native.rollback_to(snapshot_id)
        logger.info("%s rolled back to snapshot %d %s", table, snapshot_id, dict(metadata or {}))
        return snapshot_id

    def _own_protected(self, table: str) -> int | None:
        """Every Paimon consumer's next snapshot (e.g. a Flink streaming reader's) stays."""
        consumed: int | None = self.paimon_table(table).consumer_manager().min_next_snapshot()
        return consumed

    def _storage(self, table: str, floor: int) -> _retention.Storage:
        """Snapshots below `floor` are expired (their snapshot files deleted first, `EARLIEST` moved); the
        snapshots of tags keep their files; what a Spark write left in `_staging/` goes by age alone (its files
        move into place before the commit)."""
        native = self.paimon_table(table)
        snapshots = native.snapshot_manager()
        latest = snapshots.get_latest_snapshot()
        earliest = snapshots.try_get_earliest_snapshot()
        every = [s for i in range(earliest.id, latest.id + 1) if (s := snapshots.get_snapshot_by_id(i)) is not None]
        tagged = [
            tag.trim_to_snapshot()
            for name in native.tag_manager().list_tags()
            if (tag := native.tag_manager().get(name))
        ]
        kept = [s for s in every if s.id >= floor]
        expired = [s for s in every if s.id < floor]
        ever_data, ever_meta = _referenced(self._lake, native, every)
        live_data, live_meta = _referenced(self._lake, native, kept + tagged)
        location = self._lake.normalize(native.table_path)
        staging = f"{location}/{_STAGING_DIR}/"
        files = self._files_of(native)
        found = {path: stat.mtime for path, stat in files.list_files(location).items()}
        kept_files = {
            p: mtime
            for p, mtime in found.items()
            if not p.startswith(staging) and p.rsplit("/", 1)[-1].startswith(("data-", "manifest-"))
        }

        def expire() -> None:
            if expired:
                native.file_io.write_file(f"{snapshots.snapshot_dir}/EARLIEST", str(floor), overwrite=True)

        return _retention.Storage(
            files=kept_files,
            live=live_data | live_meta,
            ever=ever_data | ever_meta,
            abandoned={p: mtime for p, mtime in found.items() if p.startswith(staging)},
            expired=[self._lake.normalize(snapshots.get_snapshot_path(s.id)) for s in expired],
            expire=expire,
            delete=files.delete,
        )

    def arrow_dataset(self, table: str, snapshot_id: int) -> pads.Dataset:
        """The table at `snapshot_id` as a pyarrow Dataset (lazy over its parquet data files).

        Primary-key tables and tables with deletion vectors are read by pypaimon's own reader instead.

        Example:
            ds = catalog.arrow_dataset("lake.raw.orders", 12)
        """
        import pyarrow.dataset as pads
        from pypaimon.schema.data_types import PyarrowFieldParser

        at = self.paimon_table(table, snapshot_id=snapshot_id)
        fields = _fields_at(at, snapshot_id)
        try:
            files = _current_files(at, table, lake=self._lake)
        except UnsupportedTable:
            builder = at.new_read_builder()
            return pads.dataset(builder.new_read().to_arrow(builder.new_scan().plan().splits()))
        paths, filesystem = self._files_of(at).dataset_paths(sorted(files))
        schema = PyarrowFieldParser.from_paimon_schema(fields)
        return pads.dataset(paths, schema=schema, format="parquet", filesystem=filesystem)

    # The write steps (`SparkWrittenCatalog.write` runs them): Spark writes the data files (through pypaimon in
    # its tasks for tables Spark's writer cannot write alike), the driver commits them with commit user = job id
    # and commit identifier = barrier.

    def _check_mode(self, table: str, mode: WriteMode) -> None:
        if mode.schema == "overwrite":
            raise ValueError(
                f"schema='overwrite' is not supported for Paimon table {table!r}: drop and re-create the table"
            )

    def _tagged_snapshot(self, handle: FileStoreTable, *, app_id: str, barrier: int) -> int | None:
        return _tagged_snapshot(handle, app_id=app_id, barrier=barrier)

    def _table_schema(self, handle: FileStoreTable) -> StructType:
        return _spark_schema(handle.table_schema.fields)

    def _live_files(self, table: str, handle: FileStoreTable) -> dict[str, _File]:
        return _current_files(handle, table, lake=self._lake)

    def _prepare(self, write: PendingWrite, handle: FileStoreTable | None) -> FileStoreTable:
        """Create the table, or add the new columns as one Paimon schema change (not a snapshot)."""
        if handle is None:
            return self._create(write.table, write.schema)
        return self._add_columns(write.table, handle, write.schema) if write.added else handle

    def _write_files(self, write: PendingWrite, handle: FileStoreTable | None, data: DataFrame) -> list[CommitMessage]:
        assert handle is not None  # `_prepare` created the table
        with _writes.microsecond_timestamps(write.spark):
            if (codec := _spark_codec(handle)) is not None:
                staging = self._staging(write, handle)
                writer = data.write.mode(NEW_DIRECTORY).option(NO_SUCCESS_MARKER, "false").option("compression", codec)
                writer.parquet(self._lake.spark_path(staging))
                return self._staged(write, handle, staging)
            user, identifier = write.tag or _committer(write.write_id)
            schema = _arrow_schema(write.schema)
            task = _write_task(handle.table_path, self.storage_options, user, identifier, schema)
            collected = data.mapInArrow(task, "messages binary").collect()
            return [m for row in collected for m in pickle.loads(row[0])]

    def _staging(self, write: PendingWrite, handle: FileStoreTable | None) -> str:
        assert handle is not None  # `_prepare` created the table
        return f"{self._lake.normalize(handle.table_path)}/{_STAGING_DIR}/{write.write_id}"

    def _staged(self, write: PendingWrite, handle: FileStoreTable | None, staging: str) -> list[CommitMessage]:
        """The files move into `bucket-0/` under Paimon's names; one commit message describes them."""
        del write
        assert handle is not None
        return _place_files(self._lake, self._files_of(handle), handle, staging)

    def _commit(
        self, write: PendingWrite, handle: FileStoreTable | None, staged: list[CommitMessage], removed: list[_File]
    ) -> int:
        assert handle is not None
        gone = _current_files(handle, write.table, lake=self._lake).values() if write.replaces_all else removed
        user, identifier = write.tag or _committer(write.write_id)
        return _commit(handle, user, identifier, [*staged, *_removals(gone)], write.properties)

    def _warehouse(self, catalog: str) -> PaimonNativeCatalog:
        if catalog not in self._catalogs:
            from pypaimon import CatalogFactory

            options = {**self.storage_options, "warehouse": self._lake.join(catalog)}
            self._catalogs[catalog] = CatalogFactory.create(options)
        return self._catalogs[catalog]

    def _open(self, table: str) -> FileStoreTable | None:
        from pypaimon.catalog.catalog_exception import TableNotExistException

        catalog, database, name = _writes.split_name(table)
        try:
            native = self._warehouse(catalog).get_table(f"{database}.{name}")
        except TableNotExistException:
            return None
        assert _is_file_store_table(native)
        return native

    def _create(self, table: str, schema: StructType) -> FileStoreTable:
        """Create the table (racing creators: the loser opens the winner's table and checks its schema)."""
        from pypaimon import Schema

        catalog, database, name = _writes.split_name(table)
        warehouse = self._warehouse(catalog)
        warehouse.create_database(database, True)
        warehouse.create_table(
            f"{database}.{name}", Schema.from_pyarrow_schema(_arrow_schema(schema), options=_TABLE_OPTIONS), True
        )
        native = self._open(table)
        assert native is not None
        _writes.resolve_schema(table, _spark_schema(native.table_schema.fields), schema, Append())
        return native

    def _add_columns(self, table: str, native: FileStoreTable, schema: StructType) -> FileStoreTable:
        """Add the columns of `schema` the table lacks (schema policy `merge`), as one Paimon schema change."""
        from pypaimon.schema.data_types import PyarrowFieldParser
        from pypaimon.schema.schema_change import SchemaChange

        have = {f.name for f in native.table_schema.fields}
        arrow = _arrow_schema(schema)
        changes = [
            SchemaChange.add_column(f.name, PyarrowFieldParser.to_paimon_type(f.type, True))
            for f in arrow
            if f.name not in have
        ]
        catalog, database, name = _writes.split_name(table)
        self._warehouse(catalog).alter_table(f"{database}.{name}", changes)
        reopened = self._open(table)
        assert reopened is not None
        return reopened


def _is_file_store_table(native: Any) -> bool:
    from pypaimon.table.file_store_table import FileStoreTable

    return isinstance(native, FileStoreTable)


def _committer(write_id: str) -> tuple[str, int]:
    """Commit user and identifier of an untagged write (a tagged one commits as job id and barrier)."""
    return f"metaservice-{write_id}", _batch_identifier()


def _batch_identifier() -> int:
    from pypaimon.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER

    return int(BATCH_COMMIT_IDENTIFIER)


def _spark_codec(native: FileStoreTable) -> str | None:
    """Spark's name for the table's parquet codec when Spark's own writer can write this table's data files,
    else None (the executors write with pypaimon).

    Spark's files are what pypaimon's writer produces only for plain append tables: one bucket-unaware
    directory, parquet, no value statistics (`metadata.stats-mode` other than `full`: pypaimon then writes
    none), no external paths, row tracking or data evolution (row ids, sidecar files), no variant shredding.
    (Changelog files need primary keys: such tables are refused before writing.)
    """
    from pypaimon.table.bucket_mode import BucketMode

    options = native.options
    if (
        native.partition_keys
        or native.bucket_mode() != BucketMode.BUCKET_UNAWARE
        or str(options.file_format("parquet")).lower() != "parquet"
        or options.metadata_stats_enabled()
        or options.data_file_external_paths()
        or options.row_tracking_enabled(False)
        or options.data_evolution_enabled(False)
        or options.variant_shredding_schema()
    ):
        return None
    return _SPARK_CODECS.get(str(options.file_compression("zstd")).lower())


def _place_files(lake: LakeRoot, files: Files, native: FileStoreTable, staging: str) -> list[CommitMessage]:
    """The parquet files Spark wrote into `staging` move into `bucket-0/` as Paimon names them; one commit message
    describes them the way pypaimon's append writer does (statistics empty, sequence numbers 0, level 0)."""
    from pypaimon.common.options.core_options import CoreOptions
    from pypaimon.manifest.schema.data_file_meta import DataFileMeta
    from pypaimon.manifest.schema.simple_stats import SimpleStats
    from pypaimon.table.row.generic_row import GenericRow
    from pypaimon.utils.file_store_path_factory import canonical_data_file_path
    from pypaimon.write.commit_message import CommitMessage

    prefix = CoreOptions.data_file_prefix(native.options)
    metas = []
    sizes = {path: stat.size for path, stat in files.list_files(staging, recursive=False).items()}
    for path, rows in _writes.written_row_counts(files, staging).items():
        name = f"{prefix}{uuid.uuid4()}-0.parquet"
        target = lake.driver_path(canonical_data_file_path(native, (), 0, name))
        files.move(path, target)
        metas.append(
            DataFileMeta.create(
                file_name=name,
                file_size=sizes[path],
                row_count=rows,
                min_key=GenericRow([], []),
                max_key=GenericRow([], []),
                key_stats=SimpleStats.empty_stats(),
                value_stats=SimpleStats.empty_stats(),
                min_sequence_number=0,
                max_sequence_number=0,
                schema_id=native.table_schema.id,
                level=0,
                extra_files=[],
                delete_row_count=0,
                file_source=0,  # APPEND
                value_stats_cols=[],
                file_path=target,
            )
        )
    if metas and files.local:
        files.remove_empty_directory(staging)
    return [CommitMessage(partition=(), bucket=0, new_files=metas, deleted_files=[])] if metas else []


def _write_task(
    location: str, options: Mapping[str, str], user: str, identifier: int, schema: pa.Schema
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What each Spark task runs: write its rows with pypaimon, return the commit messages (pickled)."""
    file_io_options = dict(options) or None

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pypaimon.table.file_store_table import FileStoreTable

        native = FileStoreTable.from_path(location, file_io_options)
        writer = native.new_stream_write_builder()._with_commit_user(user).new_write()
        try:
            for batch in batches:
                if batch.num_rows:
                    writer.write_arrow(pa.Table.from_batches([batch]).cast(schema))
            messages = [m for m in writer.prepare_commit(identifier) if not m.is_empty()]
        finally:
            writer.close()
        yield pa.RecordBatch.from_pydict(
            {"messages": [pickle.dumps(messages)]}, schema=pa.schema([("messages", pa.binary())])
        )

    return write


def _removals(files: Iterable[_File]) -> list[CommitMessage]:
    """Commit messages removing `files`, one per (partition, bucket)."""
    from pypaimon.write.commit_message import CommitMessage

    grouped: dict[tuple[tuple[Any, ...], int], list[DataFileMeta]] = {}
    for file in files:
        grouped.setdefault((file.partition, file.bucket), []).append(file.meta)
    return [
        CommitMessage(partition=p, bucket=b, new_files=[], deleted_files=metas) for (p, b), metas in grouped.items()
    ]


def _commit(
    native: FileStoreTable, user: str, identifier: int, messages: list[CommitMessage], properties: dict[str, str]
) -> int:
    """One snapshot of `messages` as commit `(user, identifier)`; returns its id (Paimon retries lost races)."""
    from pypaimon.write.commit_callback import CommitCallback

    class Recorder(CommitCallback):  # type: ignore[misc]
        snapshot_id: int | None = None

        def call(self, context: Any) -> None:
            self.snapshot_id = context.snapshot.id

    recorder = Recorder()
    commit = native.new_stream_write_builder()._with_commit_user(user).new_commit()
    commit.add_commit_callback(recorder)
    try:
        commit.commit(messages, identifier, snapshot_properties=properties)
    finally:
        commit.close()
    if recorder.snapshot_id is None:
        raise RuntimeError(f"the commit of {user}/{identifier} produced no snapshot of {native.table_path}")
    return recorder.snapshot_id


def _tagged_snapshot(native: FileStoreTable, *, app_id: str, barrier: int) -> int | None:
    """The newest snapshot with commit user `app_id` and identifier `barrier`, scanning back from the latest."""
    snapshots = native.snapshot_manager()
    latest = snapshots.get_latest_snapshot()
    if latest is None:
        return None
    earliest = snapshots.try_get_earliest_snapshot()
    for snapshot_id in range(latest.id, earliest.id - 1, -1):
        snapshot = snapshots.get_snapshot_by_id(snapshot_id)
        if snapshot is None or snapshot.commit_user != app_id:
            continue
        if snapshot.commit_identifier == barrier:
            return snapshot_id
        if snapshot.commit_identifier < barrier:
            return None  # a job commits its barriers in order: older ones follow
    return None


def _travel(native: FileStoreTable, table: str, snapshot_id: int) -> FileStoreTable:
    """The opened table as of `snapshot_id` (Paimon time travel: no second load); ValueError when it is gone."""
    if native.snapshot_manager().get_snapshot_by_id(snapshot_id) is None:
        raise ValueError(f"{table!r} has no snapshot {snapshot_id} (never committed, rolled back or expired)")
    return native.copy({"scan.snapshot-id": str(snapshot_id)})


def _files_suffice(native: FileStoreTable, table: str) -> None:
    """UnsupportedTable when the data files alone would mislead a reader (merge on read, deletion vectors)."""
    if native.is_primary_key_table:
        raise UnsupportedTable(f"{table!r} is a primary-key table (merge on read); read it with paimon_table")
    if native.options.deletion_vectors_enabled():
        raise UnsupportedTable(f"{table!r} uses deletion vectors; read it with paimon_table")


def _current_files(native: FileStoreTable, table: str, *, lake: LakeRoot = LOCAL) -> dict[str, _File]:
    """Data files of the table's (time-travelled) snapshot by path (the driver's form); UnsupportedTable when
    files alone mislead."""
    _files_suffice(native, table)
    files: dict[str, _File] = {}
    for split in native.new_read_builder().new_scan().plan().splits():
        partition = tuple(split.partition.values) if split.partition is not None else ()
        for meta in split.files:
            files[lake.normalize(meta.file_path)] = _File(partition, split.bucket, meta)
    return files


def _added_between(
    native: FileStoreTable, table: str, after: int, until: int, *, lake: LakeRoot = LOCAL
) -> tuple[set[str], int]:
    """(paths of the data files added after snapshot `after` up to `until`, how many files of `after` are gone).

    Reads the delta manifests of the snapshots in between: a barrier's changes are a file or two, while a full
    plan reads every manifest of the table, and pypaimon never merges manifests (one more per commit: a plan
    over 150 commits took 55 ms, `read_changes` by two plans 108 ms). A file added and removed in between is in
    neither. Over more than `DELTA_SNAPSHOTS` snapshots, or when one in between is gone, it compares the two
    snapshots' full file lists instead (as Paimon's own `IncrementalDiffScanner` does for long ranges).
    """
    _files_suffice(native, table)
    manager = native.snapshot_manager()
    between = (
        [manager.get_snapshot_by_id(i) for i in range(after + 1, until + 1)] if until - after <= DELTA_SNAPSHOTS else []
    )
    if until > after and (not between or any(s is None for s in between)):
        now = _current_files(_travel(native, table, until), table, lake=lake)
        before = _current_files(_travel(native, table, after), table, lake=lake)
        return set(now.keys() - before.keys()), len(before.keys() - now.keys())
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager
    from pypaimon.utils.file_store_path_factory import canonical_data_file_path

    lists, manifests = ManifestListManager(native), ManifestFileManager(native)
    added: dict[tuple[Any, ...], str] = {}
    gone = 0
    for snapshot in between:
        assert snapshot is not None
        for manifest in lists.read_delta(snapshot):
            for entry in manifests.read(manifest.file_name, file_size=manifest.file_size):
                values = tuple(entry.partition.values) if entry.partition is not None else ()
                key = (values, entry.bucket, entry.file.file_name)
                if entry.kind == 0:  # ADD
                    meta = entry.file
                    path = (
                        meta.physical_path()
                        if meta.external_path
                        else canonical_data_file_path(native, values, entry.bucket, meta.file_name)
                    )
                    added[key] = lake.normalize(path)
                elif added.pop(key, None) is None:  # DELETE of a file older than `after`
                    gone += 1
    return set(added.values()), gone


def _fields_at(native: FileStoreTable, snapshot_id: int) -> list[Any]:
    snapshot = native.snapshot_manager().get_snapshot_by_id(snapshot_id)
    schema = native.schema_manager.get_schema(snapshot.schema_id) if snapshot is not None else None
    return list((schema or native.table_schema).fields)


def _referenced(lake: LakeRoot, native: FileStoreTable, snapshots: list[Snapshot]) -> tuple[set[str], set[str]]:
    """Data files, and manifest lists and manifests, that `snapshots` reference (the driver's paths)."""
    from pypaimon.manifest.manifest_list_manager import ManifestListManager

    lists = ManifestListManager(native)
    manifest_dir = f"{lake.normalize(native.table_path)}/manifest"
    data: set[str] = set()
    meta: set[str] = set()
    for snapshot in snapshots:
        for name in (snapshot.base_manifest_list, snapshot.delta_manifest_list, snapshot.changelog_manifest_list):
            if name:
                meta.add(f"{manifest_dir}/{name}")
        if snapshot.index_manifest:
            meta.add(f"{manifest_dir}/{snapshot.index_manifest}")
        for manifest in lists.read_all(snapshot):
            meta.add(f"{manifest_dir}/{manifest.file_name}")
        travelled = native.copy({"scan.snapshot-id": str(snapshot.id)})
        data.update(_current_files(travelled, str(native.identifier), lake=lake))
    return data, meta


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _spark_schema(fields: list[Any]) -> StructType:
    """Paimon fields as Spark sees them."""
    from pypaimon.schema.data_types import PyarrowFieldParser
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(PyarrowFieldParser.from_paimon_schema(fields), prefer_timestamp_ntz=True)
