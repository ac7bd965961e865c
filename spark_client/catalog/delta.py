"""Delta tables written by Spark's parquet writer and committed to the Delta log by `deltalake` (driver).

No Delta jars are needed in Spark; the tables are ordinary Delta tables any Delta reader can open. A write
is two steps: Spark's distributed writer puts parquet files into a fresh directory inside the table, then
the driver commits exactly those files to the log. Files of a write that dies in between are in no version,
so every reader ignores them. Each commit of a job carries an app transaction (txnAppId = job id,
txnVersion = barrier) and commit metadata naming the barrier and the job, so a job that crashed after
committing finds its own commit instead of writing twice.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from deltalake import DeltaTable  # the `delta` extra: importing DeltaCatalog without it names the extra

from spark_client.catalog import _retention, _writes
from spark_client.catalog._lake import Files, LakeRoot
from spark_client.catalog._writes import (
    BARRIER_KEY,
    JOB_KEY,
    NEW_DIRECTORY,
    NO_SUCCESS_MARKER,
    RESTORES_KEY,
    SCHEMA_KEY,
    WRITE_KEY,
    PendingWrite,
    SparkWrittenCatalog,
    _int_or_none,
    frame,
)
from spark_client.catalog.base import CommitKind, CommitRecord, NotAppendOnly, UnsupportedTable
from spark_client.modes import Append

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

logger = logging.getLogger("spark_client.catalog")

# Delta operations that never change which rows the table holds (compaction, maintenance, properties).
_ROW_NEUTRAL_OPERATIONS = frozenset(
    {
        "OPTIMIZE",
        "VACUUM START",
        "VACUUM END",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
        "UPGRADE PROTOCOL",
        "ADD FEATURE",
        "CHANGE COLUMN",
        "UPDATE SCHEMA",
        "ADD COLUMN",
        "ADD COLUMNS",
    }
)
_DATA_DIR = "data"  # each write gets <table>/data/<write id>/; the log holds paths relative to the table
_STRING_STATS_CHARS = 32  # like Delta Spark: longer values only get a (truncated, still valid) minimum
_UNREADABLE_FEATURES = frozenset({"deletionVectors", "columnMapping"})  # a file list alone would be wrong


@dataclass(frozen=True)
class DeltaCommit:
    """One commit of a Delta table, with the MetaService tags when a job wrote it.

    Attributes:
        version: the Delta version the commit created.
        timestamp: when it was committed (UTC), if the log says.
        operation: the Delta operation, e.g. "WRITE", "CREATE TABLE", "RESTORE".
        barrier: the barrier a job committed here, or None.
        job_id: the job that committed it, or None.
        info: the raw commitInfo, including any custom metadata.
    """

    version: int
    timestamp: datetime | None
    operation: str
    barrier: int | None
    job_id: str | None
    info: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> DeltaCommit:
        """Build from a commitInfo that carries its `version`, like `DeltaTable.history()` entries.

        Example:
            commit = DeltaCommit.from_info({"version": 3, "operation": "WRITE", "metaservice.barrier": "7"})
        """
        millis, barrier = info.get("timestamp"), info.get(BARRIER_KEY)
        job = info.get(JOB_KEY)
        return cls(
            version=int(info["version"]),
            timestamp=datetime.fromtimestamp(millis / 1000, UTC) if isinstance(millis, int) else None,
            operation=str(info.get("operation", "")),
            barrier=int(barrier) if isinstance(barrier, str) and barrier.lstrip("-").isdigit() else None,
            job_id=job if isinstance(job, str) else None,
            info=dict(info),
        )


_LiveFile = tuple[str, int | None]  # a data file as the log holds it: (path relative to the table, size)


class DeltaCatalog(SparkWrittenCatalog["DeltaTable", _LiveFile, "list[AddAction]"]):
    """Delta tables under one warehouse root: `lake.sales.orders` lives at `<root>/lake/sales/orders`.

    Snapshot ids are Delta versions. The first write creates the table (version 0) with the DataFrame's
    schema, every column nullable as in Delta Spark; later writes must match it.

    Args:
        root: a local directory (created on the first write) or an object-store URI: `s3://bucket/lake`
            (Spark writes it as `s3a://`), `gs://…`, `abfss://container@account.dfs.core.windows.net/…`.
        storage_options: deltalake's storage options for an object store (credentials, endpoint, region:
            `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, `AWS_REGION`, `AZURE_STORAGE_ACCOUNT_NAME`, …), used by every
            driver-side commit, listing, vacuum and non-Spark read. Spark's own connector is configured in Spark.

    Example:
        catalog = DeltaCatalog("/data/lake")
        catalog = DeltaCatalog("s3://warehouse/lake", storage_options={"AWS_REGION": "eu-west-1"})
        version = catalog.append(spark, df, "lake.raw.orders")
        catalog.read_at(spark, "lake.raw.orders", version).count()
    """

    format = "delta"
    _format_name = "a Delta"
    _commit_failpoint = "after_delta_commit"

    def __init__(self, root: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None) -> None:
        self._lake = LakeRoot.parse(root, what="a Delta lake root")
        self.root = self._lake.uri
        self.storage_options = dict(storage_options or {})
        self._file_system: Files | None = None

    def __repr__(self) -> str:
        return f"DeltaCatalog({self.root!r})"

    @property
    def files(self) -> Files:
        """The lake's files as the driver reaches them: the local file system, or deltalake's own object-store
        client (`DeltaStorageHandler`, with `storage_options`)."""
        if self._file_system is None:
            if self._lake.is_local:
                self._file_system = Files()
            else:
                import pyarrow.fs as pafs
                from deltalake.fs import DeltaStorageHandler

                prefix = self.root + "/"
                handler = DeltaStorageHandler(self.root, self.storage_options or None)
                self._file_system = Files(pafs.PyFileSystem(handler), lambda path: path.removeprefix(prefix))
        return self._file_system

    def _table(self, location: str, version: int | None = None) -> DeltaTable:
        return DeltaTable(location, version=version, storage_options=self.storage_options or None)

    def location(self, table: str) -> str:
        """The directory of `table`.

        Args:
            table: `catalog.database.table`; each part matches `[A-Za-z0-9_][A-Za-z0-9_-]{0,127}`.

        Returns:
            `<root>/<catalog>/<database>/<table>`.

        Raises:
            ValueError: the name is malformed.

        Example:
            DeltaCatalog("/data/lake").location("lake.sales.orders")   # "/data/lake/lake/sales/orders"
        """
        return self._lake.join(*_writes.split_name(table))

    def latest_snapshot(self, table: str) -> int | None:
        """The newest Delta version of `table`.

        Returns:
            The version, or None when the table does not exist yet.

        Example:
            catalog.latest_snapshot("lake.raw.orders")   # e.g. 12
        """
        delta = self._open(table)
        return None if delta is None else delta.version()

    def commits_after(self, table: str, snapshot_id: int | None) -> list[CommitRecord]:
        """The commits of `table` after version `snapshot_id` (all when None), newest first, with their tags.

        Read from the commit files themselves. A Delta `RESTORE` (a rollback, or a job undoing an aborted
        attempt) is reported with the version it brought back; an undo to "no rows" with None.

        Raises:
            ValueError: the table's newest version is older than `snapshot_id`, or the table is gone although
                `snapshot_id` is given (storage lost commits MetaService knows of).

        Example:
            for commit in catalog.commits_after("lake.mart.orders_enriched", 4):
                print(commit.snapshot_id, commit.kind, commit.job_id, commit.barrier)
        """
        delta = self._open(table)
        newest = None if delta is None else delta.version()
        if snapshot_id is not None and (newest is None or newest < snapshot_id):
            raise ValueError(
                f"{table!r} is at version {newest} in storage, older than version {snapshot_id} that MetaService "
                "holds for it: the table was replaced or lost commits; restore it or roll the pipeline back"
            )
        if newest is None:
            return []
        records = []
        for version in range(newest, -1 if snapshot_id is None else snapshot_id, -1):
            info = _commit_info(self.files, self.location(table), version)
            if info is None:
                break  # older commits were cleaned from the log
            records.append(_record(info))
        return records

    def committed_snapshot(self, table: str, *, app_id: str, barrier: int) -> int | None:
        """The version `app_id` committed for `barrier` earlier, e.g. before a crash kept it from reporting.

        The app transaction says whether the job got as far as `barrier`; the commit metadata says which
        version holds it. Commits undone by a later restore (a rollback) do not count.

        Returns:
            The version, or None when the job has no live commit for `barrier` in `table`.

        Example:
            version = catalog.committed_snapshot("lake.mart.orders_enriched", app_id="enrich", barrier=1042)
            if version is None:
                version = catalog.write(spark, df, "lake.mart.orders_enriched", mode="append",
                                        app_id="enrich", barrier=1042)
        """
        delta = self._open(table)
        if delta is None:
            return None
        return _tagged_version(self.files, self.location(table), delta, app_id=app_id, barrier=barrier)

    def read_at(self, spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
        """`table` exactly as of Delta version `snapshot_id`: Spark reads that version's file list.

        Raises:
            UnsupportedTable: the table uses Delta features a file list cannot express.

        Example:
            orders = catalog.read_at(spark, "lake.raw.orders", 12)
        """
        delta = self._open_readable(table, snapshot_id)
        return frame(spark, _spark_schema(delta), delta.file_uris(), self._lake)

    def read_changes(
        self, spark: SparkSession, table: str, *, after_snapshot_id: int | None, snapshot_id: int
    ) -> DataFrame:
        """Rows added after version `after_snapshot_id` up to `snapshot_id` (all rows when it is None).

        These are the files of `snapshot_id` that `after_snapshot_id` does not have; valid only while the
        table is append-only in between.

        Raises:
            NotAppendOnly: files of `after_snapshot_id` were removed in between (overwrite, restore).
            ValueError: `after_snapshot_id` is newer than `snapshot_id`.

        Example:
            new_orders = catalog.read_changes(spark, "lake.raw.orders", after_snapshot_id=11, snapshot_id=12)
        """
        if after_snapshot_id is None:
            return self.read_at(spark, table, snapshot_id)
        if after_snapshot_id > snapshot_id:
            raise ValueError(f"after_snapshot_id {after_snapshot_id} is newer than snapshot_id {snapshot_id}")
        now = self._open_readable(table, snapshot_id)
        files = now.file_uris()
        before = set(self._table(self.location(table), after_snapshot_id).file_uris())
        if gone := len(before.difference(files)):
            raise NotAppendOnly(
                f"{table!r} is not append-only between versions {after_snapshot_id} and {snapshot_id}: "
                f"{gone} file(s) were removed (overwritten, merged or restored); read it whole with read_at",
                table=table,
                after_snapshot_id=after_snapshot_id,
                snapshot_id=snapshot_id,
            )
        return frame(spark, _spark_schema(now), [f for f in files if f not in before], self._lake)

    def history(self, table: str, *, limit: int | None = None) -> list[DeltaCommit]:
        """Commits of `table`, newest first, with their barrier and job tags when a job wrote them.

        Args:
            limit: at most this many of the newest commits.

        Example:
            for commit in catalog.history("lake.mart.orders_enriched", limit=5):
                print(commit.version, commit.job_id, commit.barrier)
        """
        delta = self._open(table)
        if delta is None:
            return []
        infos = _newest_first(self.files, self.location(table), delta.version())
        return [DeltaCommit.from_info(i) for i in itertools.islice(infos, limit)]

    def restore(self, table: str, snapshot_id: int | None, *, metadata: Mapping[str, str] | None = None) -> int:
        """Make `table` hold the data (and schema) of version `snapshot_id` again, as a new version; returns it.

        `snapshot_id=None` empties the table (a commit removing every file, tagged `metaservice.restores =
        "none"`): the state before a job's first commit, when an aborted attempt created the table.

        Example:
            catalog.restore("lake.mart.orders_enriched", 4)
        """
        from deltalake import CommitProperties

        location, write_id = self.location(table), uuid.uuid4().hex
        delta = self._table(location)
        read_version = delta.version()
        custom = {**(metadata or {}), WRITE_KEY: write_id}
        if snapshot_id is None:
            custom[RESTORES_KEY] = "none"
            delta.create_write_transaction(
                [], "overwrite", delta.schema(), commit_properties=CommitProperties(custom_metadata=custom)
            )
        else:
            delta.restore(snapshot_id, commit_properties=CommitProperties(custom_metadata=custom))
        return _own_version(self.files, location, read_version=read_version, write_id=write_id)

    def _storage(self, table: str, floor: int) -> _retention.Storage:
        """Every file of every version from `floor` to the newest stays; the log itself is never touched."""
        location, lake = self.location(table), self._lake
        newest = self._table(location).version()
        keep: set[str] = set()
        for version in range(floor, newest + 1):
            keep.update(lake.normalize(p) for p in self._table(location, version).file_uris())
        ever = {lake.normalize(f"{location}/{unquote(a['path'])}") for a in _all_add_paths(self.files, location)}
        log = f"{location}/_delta_log/"
        files = {
            path: stat.mtime
            for path, stat in self.files.list_files(location).items()
            if not path.startswith(log) and path.endswith(".parquet")
        }
        return _retention.Storage(files=files, live=keep, ever=ever, delete=self.files.delete)

    def arrow_dataset(self, table: str, snapshot_id: int) -> pads.Dataset:
        """The table at version `snapshot_id` as a pyarrow Dataset, opened by deltalake (no Spark).

        Example:
            ds = catalog.arrow_dataset("lake.raw.orders", 12)
        """
        dataset: pads.Dataset = self._table(self.location(table), snapshot_id).to_pyarrow_dataset()
        return dataset

    def _open(self, table: str) -> DeltaTable | None:
        from deltalake.exceptions import TableNotFoundError

        try:
            return self._table(self.location(table))
        except TableNotFoundError:
            return None

    def _open_readable(self, table: str, version: int) -> DeltaTable:
        delta = self._table(self.location(table), version)
        features = set(delta.protocol().reader_features or ()) & _UNREADABLE_FEATURES
        if features or delta.metadata().partition_columns:
            what = sorted(features) or ["partition columns"]
            raise UnsupportedTable(f"{table!r} uses {', '.join(what)}; this catalog reads unpartitioned plain tables")
        return delta

    # The write steps (`SparkWrittenCatalog.write` runs them): Spark writes parquet files into a fresh directory
    # <table>/data/<write id>/, the driver commits exactly those files to the log (with the files the mode
    # replaces as remove actions) and an app transaction (txnAppId = job id, txnVersion = barrier).

    def _tagged_snapshot(self, handle: DeltaTable, *, app_id: str, barrier: int) -> int | None:
        location = self._lake.driver_path(handle.table_uri)
        return _tagged_version(self.files, location, handle, app_id=app_id, barrier=barrier)

    def _table_schema(self, handle: DeltaTable) -> StructType:
        return _spark_schema(handle)

    def _live_files(self, table: str, handle: DeltaTable) -> dict[str, _LiveFile]:
        return _live_files(self._lake, self.location(table), handle)

    def _prepare(self, write: PendingWrite, handle: DeltaTable | None) -> DeltaTable | None:
        """New columns of a `schema="merge"` write are their own version (tagged `metaservice.schema_for_barrier`)
        before the data; an `Overwrite` carries the new schema in its own commit. A new table is created by the
        data commit."""
        if handle is None or not write.added or write.replaces_all:
            return handle
        from deltalake import CommitProperties
        from deltalake import Field as DeltaField

        handle.alter.add_columns(
            [DeltaField.from_json(f.json()) for f in write.added],
            commit_properties=CommitProperties(custom_metadata=write.schema_properties),
        )
        logger.info("%s: added columns %s", write.table, [f.name for f in write.added])
        return self._table(self.location(write.table))

    def _write_files(self, write: PendingWrite, handle: DeltaTable | None, data: DataFrame) -> list[AddAction]:
        staging = self._staging(write, handle)
        data.write.mode(NEW_DIRECTORY).option(NO_SUCCESS_MARKER, "false").parquet(self._lake.spark_path(staging))
        return self._staged(write, handle, staging)

    def _staging(self, write: PendingWrite, handle: DeltaTable | None) -> str:
        del handle
        return f"{self.location(write.table)}/{_DATA_DIR}/{write.write_id}"

    def _staged(self, write: PendingWrite, handle: DeltaTable | None, staging: str) -> list[AddAction]:
        del handle
        return _add_actions(self.files, staging, f"{_DATA_DIR}/{write.write_id}", write.schema)

    def _commit(
        self, write: PendingWrite, handle: DeltaTable | None, staged: list[AddAction], removed: list[_LiveFile]
    ) -> int:
        """One Delta commit of the added files (and the plan's removes), creating the table if need be."""
        from deltalake import CommitProperties, Transaction
        from deltalake import Schema as DeltaSchema
        from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

        transactions = None
        if write.tag is not None:
            transactions = [Transaction(*write.tag, int(time.time() * 1000))]
        properties = CommitProperties(custom_metadata=write.properties, app_transactions=transactions)
        location = self.location(write.table)
        delta = handle
        if delta is None:
            with _creation_lock(location, local=self._lake.is_local):
                delta = self._open(write.table)
                if delta is None:
                    create_table_with_add_actions(
                        location,
                        DeltaSchema.from_json(write.schema.json()),
                        staged,
                        mode="error",
                        storage_options=self.storage_options or None,
                        commit_properties=properties,
                    )
                    return _own_version(self.files, location, read_version=-1, write_id=write.write_id)
            # another writer created it meanwhile: commit on top when the schemas are the same
            _writes.resolve_schema(write.table, _spark_schema(delta), write.schema, Append())
        read_version = delta.version()
        now = int(time.time() * 1000)
        removes = [RemoveAction(path, True, now, size, {}) for path, size in removed]
        schema = DeltaSchema.from_json(write.schema.json()) if write.replaces_all else delta.schema()
        delta.create_write_transaction(
            list[AddAction | RemoveAction]([*staged, *removes]),
            "overwrite" if write.replaces_all else "append",
            schema,
            commit_properties=properties,
        )
        return _own_version(self.files, location, read_version=read_version, write_id=write.write_id)


@contextmanager
def _creation_lock(location: str, *, local: bool) -> Iterator[None]:
    """Serialize creating a table between writers on this machine (threads and processes alike).

    delta-rs checks "table exists" before committing version 0 and retries a lost race as version 1, so two
    racing creates both succeed and the second replaces the table's metadata under concurrent appends. An
    object store has no lock to take: there, creating a table is not serialized (a table has one writing job;
    two processes creating the same new root table at once is the case left open).
    """
    if not local:
        yield
        return
    fd = os.open(location, os.O_RDONLY)  # the table directory: Spark created it for the staging files
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _own_version(files: Files, location: str, *, read_version: int, write_id: str) -> int:
    """The version our commit got: the next one, unless concurrent writers committed in between."""
    version = read_version + 1
    while (info := _commit_info(files, location, version)) is not None:
        if info.get(WRITE_KEY) == write_id:
            return version
        version += 1
    raise RuntimeError(f"the commit of write {write_id} is not in the log after version {read_version}")


def _tagged_version(files: Files, location: str, delta: DeltaTable, *, app_id: str, barrier: int) -> int | None:
    done = delta.transaction_version(app_id)
    if done is None or done < barrier:
        return None
    for info in _newest_first(files, location, delta.version()):
        if info.get("operation") == "RESTORE":
            return None  # commits before a rollback's restore were undone: recompute
        if info.get(BARRIER_KEY) == str(barrier) and info.get(JOB_KEY) == app_id:
            return int(info["version"])
    return None


def _record(info: Mapping[str, Any]) -> CommitRecord:
    """A commit info as the job logic sees it (see `CommitRecord`)."""
    version, operation = int(info["version"]), str(info.get("operation", ""))
    job = info.get(JOB_KEY) if isinstance(info.get(JOB_KEY), str) else None
    if info.get(RESTORES_KEY) == "none":
        return CommitRecord(version, "restore", job_id=job, restored_snapshot_id=None)
    if operation == "RESTORE":
        target = (info.get("operationParameters") or {}).get("version")
        if isinstance(target, int | str) and str(target).isdigit():
            return CommitRecord(version, "restore", job_id=job, restored_snapshot_id=int(target))
        return CommitRecord(version, "write", job_id=job)  # restored by timestamp: which data is unknown
    if SCHEMA_KEY in info:
        return CommitRecord(version, "schema", job_id=job, barrier=_int_or_none(info.get(SCHEMA_KEY)))
    kind: CommitKind = "other" if operation in _ROW_NEUTRAL_OPERATIONS else "write"
    return CommitRecord(version, kind, job_id=job, barrier=_int_or_none(info.get(BARRIER_KEY)))


def _live_files(lake: LakeRoot, location: str, delta: DeltaTable) -> dict[str, tuple[str, int | None]]:
    """Path (the driver's form) → (path as the log holds it, size) for each file of the loaded version."""
    import pyarrow as pa

    actions = pa.table(delta.get_add_actions(flatten=True)).select(["path", "size_bytes"]).to_pylist()
    return {lake.normalize(f"{location}/{unquote(a['path'])}"): (str(a["path"]), a["size_bytes"]) for a in actions}


def _newest_first(files: Files, location: str, newest: int) -> Iterator[dict[str, Any]]:
    """Commit infos from version `newest` down to the oldest commit the log still holds."""
    for version in range(newest, -1, -1):
        info = _commit_info(files, location, version)
        if info is None:
            return
        yield info


def _commit_info(files: Files, location: str, version: int) -> dict[str, Any] | None:
    """The commitInfo of `version` (with its `version`), or None when the log holds no such commit (any more).

    Read from the commit file itself: `DeltaTable.history()` numbers the commits it lists counting down from
    the version it loaded, so it mislabels them while other writers commit.
    """
    commit = files.read_bytes(f"{location}/_delta_log/{version:020d}.json")
    if commit is None:
        return None
    for line in commit.decode("utf-8").splitlines():
        if '"commitInfo"' in line and "commitInfo" in (action := json.loads(line)):
            return {**action["commitInfo"], "version": version}
    return {"version": version}  # commitInfo is optional in the protocol


def _spark_schema(delta: DeltaTable) -> StructType:
    """The table's schema as Spark sees it (Delta's schema JSON is Spark's)."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(delta.schema().to_json()))


def _add_actions(files: Files, staging: str, relative: str, schema: StructType) -> list[AddAction]:
    """One AddAction per non-empty parquet file Spark wrote; everything else in the directory is removed.

    Sizes come from the directory listing and row counts and statistics from the parquet footers, so the
    data itself is never read again.
    """
    from deltalake.transaction import AddAction

    entries = files.list_files(staging, recursive=False)
    for path in entries:
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".crc") or name == "_SUCCESS":
            files.delete(path)  # Hadoop checksums: no Delta reader uses them
    written = [path for path in entries if path.endswith(".parquet")]
    footers = _footers(files, written)
    kinds = _stats_kinds(schema)
    actions = []
    for path, footer in zip(written, footers, strict=True):
        if footer.num_rows == 0:
            files.delete(path)  # Spark writes one empty file for an empty DataFrame; Delta needs none
            continue
        stat = entries[path]
        actions.append(
            AddAction(
                path=f"{relative}/{path.rsplit('/', 1)[-1]}",
                size=stat.size,
                partition_values={},
                modification_time=int(stat.mtime * 1000),
                data_change=True,
                stats=_stats(footer, kinds),
            )
        )
    if not actions and files.local and os.path.isdir(staging):
        files.remove_empty_directory(staging)
    return actions


def _footers(files: Files, paths: Sequence[str]) -> list[pq.FileMetaData]:
    if len(paths) <= 4:
        return [files.footer(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(16, len(paths))) as pool:
        return list(pool.map(files.footer, paths))


def _stats_kinds(schema: StructType) -> dict[str, str]:
    """Top-level flat columns → how their min/max go into Delta stats ("" = null count only).

    Min/max are kept only where the parquet footer value maps exactly onto Delta's stats format: integers,
    dates and strings. Floats (NaN), decimals, timestamps (Delta stats are milliseconds) and binaries get
    null counts only; a reader then simply does not skip files on them.
    """
    from pyspark.sql.types import ArrayType, DateType, IntegralType, MapType, StringType, StructType

    kinds = {}
    for f in schema.fields:
        if "." in f.name or isinstance(f.dataType, StructType | ArrayType | MapType):
            continue
        if isinstance(f.dataType, IntegralType):
            kinds[f.name] = "int"
        elif isinstance(f.dataType, DateType):
            kinds[f.name] = "date"
        elif isinstance(f.dataType, StringType):
            kinds[f.name] = "string"
        else:
            kinds[f.name] = ""
    return kinds


def _stats(footer: pq.FileMetaData, kinds: Mapping[str, str]) -> str:
    """Delta file statistics (numRecords, nullCount, minValues, maxValues) from one parquet footer."""
    nulls: dict[str, int] = {}
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    groups = [footer.row_group(i) for i in range(footer.num_row_groups)]
    columns = {groups[0].column(i).path_in_schema: i for i in range(groups[0].num_columns)} if groups else {}
    for name, kind in kinds.items():
        if name not in columns:
            continue
        chunks = [g.column(columns[name]).statistics for g in groups]
        if not all(s is not None and s.has_null_count for s in chunks):
            continue
        nulls[name] = sum(s.null_count for s in chunks)
        if not kind or not all(s.has_min_max for s in chunks):
            continue
        low, high = min(s.min for s in chunks), max(s.max for s in chunks)
        if kind == "int" and isinstance(low, int) and isinstance(high, int):
            lows[name], highs[name] = low, high
        elif kind == "date" and isinstance(low, date) and isinstance(high, date):
            lows[name], highs[name] = low.isoformat(), high.isoformat()
        elif kind == "string" and isinstance(low, str) and isinstance(high, str):
            lows[name] = low[:_STRING_STATS_CHARS]  # a prefix is still a lower bound
            if len(high) <= _STRING_STATS_CHARS:
                highs[name] = high
    stats: dict[str, Any] = {"numRecords": footer.num_rows, "nullCount": nulls}
    if lows:
        stats["minValues"] = lows
    if highs:
        stats["maxValues"] = highs
    return json.dumps(stats, separators=(",", ":"))


def _all_add_paths(files: Files, location: str) -> list[dict[str, Any]]:
    """Every file ever added to the table, read from the JSON commits of its log."""
    adds: list[dict[str, Any]] = []
    for path in files.list_files(f"{location}/_delta_log", recursive=False):
        if not path.endswith(".json"):
            continue
        commit = files.read_bytes(path)
        for line in (commit or b"").decode("utf-8").splitlines():
            action = json.loads(line)
            if "add" in action:
                adds.append(action["add"])
    return adds
