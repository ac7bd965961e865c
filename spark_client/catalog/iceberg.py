"""Iceberg tables written by Spark's parquet writer and committed by `pyiceberg` from the driver.

No Iceberg jars are needed in Spark. A write is two steps, as for Delta: Spark's distributed writer puts
parquet files into a fresh directory under the table's `data/`, then the driver commits exactly those files
with pyiceberg (their statistics come from the parquet footers), together with the files the mode removes,
as one snapshot. The snapshot summary carries `metaservice.barrier` and `metaservice.job_id`, so a job that
crashed after committing finds its own snapshot instead of writing twice.

Snapshot ids. Iceberg's snapshot ids are random 64-bit integers; MetaService needs ids that grow with every
commit of a table. This catalog reports an Iceberg snapshot's **sequence number** (format version 2: the
table's `last-sequence-number` + 1 at each commit, also after a rollback) as its snapshot id, and maps it
back to the Iceberg snapshot id for reads (`iceberg_snapshot_id`, `pyiceberg_table`).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from spark_client.catalog import _retention, _writes
from spark_client.catalog._lake import Files, LakeRoot
from spark_client.catalog._writes import (
    BARRIER_KEY,
    JOB_KEY,
    NEW_DIRECTORY,
    NO_SUCCESS_MARKER,
    WRITE_KEY,
    PendingWrite,
    SparkWrittenCatalog,
)
from spark_client.catalog.base import CommitRecord, NotAppendOnly, UnsupportedTable
from spark_client.modes import Append, Overwrite

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads
    from pyiceberg.catalog import Catalog as PyIcebergCatalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

logger = logging.getLogger("spark_client.catalog")

_CATALOG_FILE = "iceberg_catalog.db"
_DATA_DIR = "data"
# Iceberg has no 8/16-bit integers (they would read back as int), no intervals, no Spark-only types.
_UNSTORABLE = _writes.UNSTORABLE | {"byte", "short"}
_MERGE_MANIFESTS = "commit.manifest-merge.enabled"
_TABLE_PROPERTIES = {
    "format-version": "2",  # sequence numbers: the snapshot ids MetaService sees
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    # Iceberg's own default (pyiceberg's is off): an append merges the table's small manifests once there are
    # `commit.manifest.min-count-to-merge` of them, so planning a scan reads a bounded number of manifests as
    # barriers go by instead of one more for every commit ever made (~1.2 ms each). 16, not Iceberg's 100: a
    # table here gets one small manifest per barrier, and rewriting 16 of them costs less than planning over 100.
    _MERGE_MANIFESTS: "true",
    "commit.manifest.min-count-to-merge": "16",
}
_COMMIT_ATTEMPTS = 8


class IcebergCatalog(SparkWrittenCatalog["Table", "DataFile", "list[str]"]):
    """Iceberg tables under one warehouse root, registered in a pyiceberg catalog.

    `lake.sales.orders` is the Iceberg table `("lake", "sales", "orders")` (namespace `lake.sales`) stored at
    `<root>/lake/sales/orders`. The first write creates it (format version 2, unpartitioned, every column
    optional) with the DataFrame's schema.

    Snapshot ids are Iceberg **sequence numbers** (1, 2, 3, … per table, growing with every commit), not
    Iceberg's random snapshot ids; `iceberg_snapshot_id` maps one to the other for Iceberg's own readers.

    Args:
        root: a local directory holding the tables' data and metadata (created on demand), or an object-store
            URI: `s3://bucket/lake` (Spark writes it as `s3a://`), `gs://…`, `abfss://…` (pyiceberg reads Azure
            with pyarrow >= 20).
        uri: SQLAlchemy URL of pyiceberg's SQL catalog; default a SQLite file `<root>/iceberg_catalog.db` for a
            local root (an object-store root needs `uri` or `catalog`: a catalog every job reaches).
            `postgresql://…` URLs use psycopg 3 (e.g. a database of MetaService's own PostgreSQL server).
        catalog: any pyiceberg catalog instead (REST, Glue, Hive, …: `pyiceberg.catalog.load_catalog(...)`);
            mutually exclusive with `uri`. Its own properties configure its FileIO.
        name: the name of the SQL catalog (rows of one database may serve several catalogs).
        storage_options: pyiceberg FileIO properties of the SQL catalog for an object store (`s3.endpoint`,
            `s3.access-key-id`, `s3.secret-access-key`, `s3.region`, `gcs.*`, `adls.*`, …); used by every
            driver-side commit, listing, vacuum and non-Spark read. Not with `catalog` (configure that one).

    Example:
        catalog = IcebergCatalog("/data/lake")                     # SQLite catalog beside the data
        catalog = IcebergCatalog("/data/lake", uri="postgresql://meta@db:5432/iceberg")
        catalog = IcebergCatalog("s3://warehouse/lake", uri="postgresql://meta@db:5432/iceberg",
                                 storage_options={"s3.region": "eu-west-1"})
        seq = catalog.append(spark, df, "lake.raw.orders")
        catalog.pyiceberg_table("lake.raw.orders").scan(
            snapshot_id=catalog.iceberg_snapshot_id("lake.raw.orders", seq)).to_arrow()
    """

    format = "iceberg"
    _format_name = "an Iceberg"
    _unstorable = _UNSTORABLE

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        uri: str | None = None,
        catalog: PyIcebergCatalog | None = None,
        name: str = "metaservice",
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        if uri is not None and catalog is not None:
            raise ValueError("give either uri (a SQL catalog) or catalog (any pyiceberg catalog), not both")
        if catalog is not None and storage_options:
            raise ValueError("storage_options configure the SQL catalog's FileIO; configure the catalog given instead")
        self._lake = LakeRoot.parse(root, what="an Iceberg warehouse root")
        if not self._lake.is_local and uri is None and catalog is None:
            raise ValueError(
                f"an Iceberg warehouse on an object store ({self._lake.uri!r}) needs a catalog every job reaches: "
                "uri='postgresql://…' (pyiceberg's SQL catalog) or catalog=load_catalog(…) (REST, Glue, Hive)"
            )
        self.root = self._lake.uri
        self.storage_options = dict(storage_options or {})
        self._uri = uri
        self._name = name
        self._catalog = catalog
        self._owns_catalog = catalog is None
        self._namespaces: set[tuple[str, str]] = set()
        self._files: Files | None = None

    def __repr__(self) -> str:
        return f"IcebergCatalog({self.root!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the database connections of the SQL catalog this object created (pyiceberg pools them).

        Example:
            with IcebergCatalog("/data/lake", uri="postgresql://meta@db/iceberg") as catalog:
                catalog.latest_snapshot("lake.raw.orders")
        """
        engine = getattr(self._catalog, "engine", None) if self._owns_catalog else None
        if engine is not None:
            engine.dispose()

    @property
    def catalog(self) -> PyIcebergCatalog:
        """The pyiceberg catalog holding the tables (the SQL catalog is created on first use)."""
        if self._catalog is None:
            from pyiceberg.catalog.sql import SqlCatalog

            if self._lake.is_local:
                os.makedirs(self.root, exist_ok=True)
            uri = self._uri or f"sqlite:///{os.path.join(self.root, _CATALOG_FILE)}"
            if uri.startswith(("postgresql://", "postgres://")):
                uri = "postgresql+psycopg://" + uri.split("://", 1)[1]  # psycopg 3, as the service uses
            warehouse = f"file://{self.root}" if self._lake.is_local else self.root
            self._catalog = SqlCatalog(self._name, uri=uri, warehouse=warehouse, **self.storage_options)
        return self._catalog

    @property
    def files(self) -> Files:
        """The warehouse's files as the driver reaches them: the local file system, or pyiceberg's own FileIO
        (`PyArrowFileIO`, configured by the catalog's properties) for an object store."""
        if self._files is None:
            if self._lake.is_local:
                self._files = Files()
            else:
                from pyiceberg.io import load_file_io

                self._files = _pyarrow_files(load_file_io(dict(self.catalog.properties), self.root), self.root)
        return self._files

    def _table_files(self, ice: Table) -> Files:
        """The table's files through the table's own FileIO (a REST catalog may vend it credentials)."""
        return self.files if self._lake.is_local else _pyarrow_files(ice.io, self.root)

    def location(self, table: str) -> str:
        """The directory of `table`: `<root>/<catalog>/<database>/<table>`.

        Raises:
            ValueError: the name is not `catalog.database.table`.

        Example:
            IcebergCatalog("/data/lake").location("lake.sales.orders")   # "/data/lake/lake/sales/orders"
        """
        return self._lake.join(*_writes.split_name(table))

    def pyiceberg_table(self, table: str) -> Table:
        """The pyiceberg `Table` of `table`, for Iceberg's own readers and tools.

        Raises:
            pyiceberg.exceptions.NoSuchTableError: the table does not exist.
            UnsupportedTable: a format version 1 table (no sequence numbers to serve as snapshot ids).

        Example:
            arrow = catalog.pyiceberg_table("lake.raw.orders").scan().to_arrow()
        """
        ice = self.catalog.load_table(_writes.split_name(table))
        if ice.metadata.format_version < 2:
            raise UnsupportedTable(f"{table!r} is an Iceberg format version 1 table; upgrade it to version 2")
        return ice

    def iceberg_snapshot_id(self, table: str, snapshot_id: int) -> int:
        """Iceberg's own snapshot id of the snapshot MetaService knows as `snapshot_id` (its sequence number).

        Raises:
            ValueError: the table has no such snapshot (never committed, or expired).

        Example:
            version = client.version("lake.mart.orders_enriched").snapshot_id
            scan = catalog.pyiceberg_table("lake.mart.orders_enriched").scan(
                snapshot_id=catalog.iceberg_snapshot_id("lake.mart.orders_enriched", version))
        """
        return _snapshot(self.pyiceberg_table(table), table, snapshot_id).snapshot_id

    def latest_snapshot(self, table: str) -> int | None:
        """The sequence number of the table's current snapshot; None when there is no table or no snapshot.

        Example:
            catalog.latest_snapshot("lake.raw.orders")   # e.g. 12
        """
        ice = self._open(table)
        current = None if ice is None else ice.current_snapshot()
        return None if current is None else _sequence(current)

    def committed_snapshot(self, table: str, *, app_id: str, barrier: int) -> int | None:
        """The snapshot `app_id` committed for `barrier` earlier (e.g. before a crash kept it from reporting).

        Only the current snapshot and its ancestors count: snapshots a rollback undid are not in that line.

        Returns:
            The sequence number, or None when the job has no live commit for `barrier` in `table`.

        Example:
            seq = catalog.committed_snapshot("lake.mart.orders_enriched", app_id="enrich", barrier=1042)
        """
        ice = self._open(table)
        return None if ice is None else _tagged_sequence(ice, app_id=app_id, barrier=barrier)

    def read_at(self, spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
        """`table` exactly as of the snapshot with sequence number `snapshot_id`: Spark reads its file list.

        Raises:
            ValueError: no such snapshot (never committed, or expired).
            UnsupportedTable: the snapshot has delete files, or columns were renamed (names would not match).

        Example:
            orders = catalog.read_at(spark, "lake.raw.orders", 12)
        """
        ice = self.pyiceberg_table(table)
        snapshot = _snapshot(ice, table, snapshot_id)
        files = [f.file_path for f in _data_files(ice, snapshot, table)]
        return _writes.frame(spark, _spark_schema(_schema_of(ice, snapshot)), files, self._lake)

    def read_changes(
        self, spark: SparkSession, table: str, *, after_snapshot_id: int | None, snapshot_id: int
    ) -> DataFrame:
        """Rows added after snapshot `after_snapshot_id` up to `snapshot_id` (all rows when it is None).

        Raises:
            NotAppendOnly: files of `after_snapshot_id` were removed in between (overwrite, rollback).
            ValueError: `after_snapshot_id` is newer than `snapshot_id`, or a snapshot does not exist.

        Example:
            new = catalog.read_changes(spark, "lake.raw.orders", after_snapshot_id=11, snapshot_id=12)
        """
        if after_snapshot_id is None:
            return self.read_at(spark, table, snapshot_id)
        if after_snapshot_id > snapshot_id:
            raise ValueError(f"after_snapshot_id {after_snapshot_id} is newer than snapshot_id {snapshot_id}")
        ice = self.pyiceberg_table(table)
        now = _snapshot(ice, table, snapshot_id)
        files = [f.file_path for f in _data_files(ice, now, table)]
        before = {f.file_path for f in _data_files(ice, _snapshot(ice, table, after_snapshot_id), table)}
        if gone := len(before.difference(files)):
            raise NotAppendOnly(
                f"{table!r} is not append-only between snapshots {after_snapshot_id} and {snapshot_id}: "
                f"{gone} file(s) were removed (overwritten or rolled back); read it whole with read_at"
            )
        schema = _spark_schema(_schema_of(ice, now))
        return _writes.frame(spark, schema, [f for f in files if f not in before], self._lake)

    def commits_after(self, table: str, snapshot_id: int | None) -> list[CommitRecord]:
        """The commits of `table`'s current line of snapshots after sequence number `snapshot_id` (all when
        None), newest first, with their tags. Snapshots a rollback moved off the current line are not in it.

        Raises:
            ValueError: the table's current snapshot is older than `snapshot_id`, or the table is gone although
                `snapshot_id` is given (storage lost commits MetaService knows of).

        Example:
            for commit in catalog.commits_after("lake.mart.orders_enriched", 4):
                print(commit.snapshot_id, commit.kind, commit.job_id, commit.barrier)
        """
        ice = self._open(table)
        current = None if ice is None else ice.current_snapshot()
        newest = None if current is None else _sequence(current)
        if snapshot_id is not None and (newest is None or newest < snapshot_id):
            raise ValueError(
                f"{table!r} is at snapshot {newest} in storage, older than snapshot {snapshot_id} that MetaService "
                "holds for it: the table was replaced or lost commits; restore it or roll the pipeline back"
            )
        if ice is None or current is None:
            return []
        records = []
        for snapshot in _ancestors(ice):
            sequence = _sequence(snapshot)
            if snapshot_id is not None and sequence <= snapshot_id:
                break
            summary = snapshot.summary
            properties = dict(summary.additional_properties) if summary is not None else {}
            neutral = summary is not None and summary.operation.value == "replace"  # compaction: same rows
            records.append(_writes.commit_record(sequence, properties, row_neutral=neutral))
        return records

    def restore(self, table: str, snapshot_id: int | None, *, metadata: Mapping[str, str] | None = None) -> int:
        """Make snapshot `snapshot_id` the table's current one again with Iceberg's own rollback.

        The current-snapshot pointer moves back (`manage_snapshots().rollback_to_snapshot`, or
        `set_current_snapshot` for a snapshot outside the current line); no new snapshot is written, so the
        returned id is `snapshot_id` itself. The next commit still gets a higher sequence number than any
        before. `metadata` is stored as table properties `metaservice.restore.<key>`.

        `snapshot_id=None` empties the table instead (a new snapshot deleting every file, tagged
        `metaservice.restores = "none"`): the state before a job's first commit, when an aborted attempt created
        the table. It returns that snapshot's sequence number.

        Returns:
            `snapshot_id`, now the current snapshot (or the emptying snapshot's sequence number).

        Example:
            catalog.restore("lake.mart.orders_enriched", 4)   # 4
        """
        ice = self.pyiceberg_table(table)
        if snapshot_id is None:
            from pyiceberg.expressions import AlwaysTrue

            properties = {**(metadata or {}), _writes.RESTORES_KEY: "none", _writes.WRITE_KEY: uuid.uuid4().hex}
            ice.delete(AlwaysTrue(), snapshot_properties=properties)
            current = ice.refresh().current_snapshot()
            assert current is not None
            return _sequence(current)
        target = _snapshot(ice, table, snapshot_id)
        current = ice.current_snapshot()
        if current is None or current.snapshot_id != target.snapshot_id:
            ancestors = {s.snapshot_id for s in _ancestors(ice)}
            with ice.manage_snapshots() as manage:
                if target.snapshot_id in ancestors:
                    manage.rollback_to_snapshot(target.snapshot_id)
                else:
                    manage.set_current_snapshot(target.snapshot_id)
        if metadata:
            with ice.transaction() as tx:
                tx.set_properties({f"metaservice.restore.{k}": v for k, v in metadata.items()})
        return snapshot_id

    def _storage(self, table: str, floor: int) -> _retention.Storage:
        """Snapshots with a sequence number below `floor` are expired (branch and tag heads never); data files,
        manifests and manifest lists are what the snapshots reference."""
        ice = self.pyiceberg_table(table)
        heads = {ref.snapshot_id for ref in ice.metadata.refs.values()}
        snapshots = list(ice.metadata.snapshots)
        expired = [s for s in snapshots if _sequence(s) < floor and s.snapshot_id not in heads]
        kept = [s for s in snapshots if s not in expired]
        ever_data, ever_meta = _referenced(self._lake, ice, snapshots)
        live_data, live_meta = _referenced(self._lake, ice, kept)
        location, storage = self.location(table), self._table_files(ice)
        found = {
            **storage.list_files(f"{location}/{_DATA_DIR}"),
            **storage.list_files(f"{location}/metadata"),
        }
        files = {
            path: stat.mtime
            for path, stat in found.items()
            if path.endswith(".parquet" if path.startswith(f"{location}/{_DATA_DIR}/") else ".avro")
        }

        def expire() -> None:
            if expired:
                ice.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in expired]).commit()

        return _retention.Storage(
            files=files,
            live=live_data | live_meta,
            ever=ever_data | ever_meta,
            expire=expire,
            delete=storage.delete,
        )

    def arrow_dataset(self, table: str, snapshot_id: int) -> pads.Dataset:
        """The table at snapshot `snapshot_id` as a pyarrow Dataset (lazy over the snapshot's parquet files).

        Snapshots with delete files or renamed columns are read by pyiceberg's own reader instead.

        Example:
            duckdb.sql("select count(*) from ds", ...)  # ds = catalog.arrow_dataset("lake.raw.orders", 12)
        """
        import pyarrow.dataset as pads

        ice = self.pyiceberg_table(table)
        snapshot = _snapshot(ice, table, snapshot_id)
        schema = _schema_of(ice, snapshot)
        try:
            files = [f.file_path for f in _data_files(ice, snapshot, table)]
        except UnsupportedTable:
            return pads.dataset(ice.scan(snapshot_id=snapshot.snapshot_id).to_arrow())
        paths, filesystem = self._table_files(ice).dataset_paths(files)
        return pads.dataset(paths, schema=schema.as_arrow(), format="parquet", filesystem=filesystem)

    # The write steps (`SparkWrittenCatalog.write` runs them): Spark writes parquet files into a fresh directory
    # <table>/data/<write id>/, the driver commits them with pyiceberg together with the files the mode removes.

    def _tagged_snapshot(self, handle: Table, *, app_id: str, barrier: int) -> int | None:
        return _tagged_sequence(handle, app_id=app_id, barrier=barrier)

    def _check_writable(self, table: str, handle: Table) -> None:
        _check_writable(handle, table)

    def _table_schema(self, handle: Table) -> StructType:
        return _spark_schema(handle.schema())

    def _live_files(self, table: str, handle: Table) -> dict[str, DataFile]:
        current = handle.current_snapshot()
        return {} if current is None else {f.file_path: f for f in _data_files(handle, current, table)}

    def _prepare(self, write: PendingWrite, handle: Table | None) -> Table | None:
        """Nothing: the table is created, and its schema changed, in the data commit's transaction."""
        del write
        return handle

    def _write_files(self, write: PendingWrite, handle: Table | None, data: DataFrame) -> list[str]:
        staging = self._staging(write, handle)
        with _writes.microsecond_timestamps(write.spark):
            writer = data.write.mode(NEW_DIRECTORY).option(NO_SUCCESS_MARKER, "false")
            writer.parquet(self._lake.spark_path(staging))
        return self._staged(write, handle, staging)

    def _staging(self, write: PendingWrite, handle: Table | None) -> str:
        del handle
        return f"{self.location(write.table)}/{_DATA_DIR}/{write.write_id}"

    def _staged(self, write: PendingWrite, handle: Table | None, staging: str) -> list[str]:
        """The paths of the non-empty files (pyiceberg reads their footers at the commit)."""
        del write, handle
        return list(_writes.written_row_counts(self.files, staging))

    def _open(self, table: str) -> Table | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.pyiceberg_table(table)
        except NoSuchTableError:
            return None

    def _create(self, table: str, schema: StructType) -> Table:
        """Create the table (racing creators: the loser loads the winner's table)."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        parts = _writes.split_name(table)
        if parts[:2] not in self._namespaces:  # one round trip less per new table (namespaces are never dropped here)
            self.catalog.create_namespace_if_not_exists(parts[:2])
            self._namespaces.add(parts[:2])
        try:
            return self.catalog.create_table(
                parts, schema=_arrow_schema(schema), location=self.location(table), properties=_TABLE_PROPERTIES
            )
        except TableAlreadyExistsError:
            return self.pyiceberg_table(table)

    def _commit(self, write: PendingWrite, handle: Table | None, staged: list[str], removed: list[DataFile]) -> int:
        """One snapshot adding `staged` and removing `removed` (every current file for a whole-table overwrite);
        a lost race with another committer is retried
        for appends and whole-table overwrites, whose plan does not depend on the snapshot it was made on."""
        from pyiceberg.exceptions import CommitFailedException
        from pyiceberg.io.pyarrow import parquet_file_to_data_file
        from pyiceberg.table import TableProperties

        table, loaded, schema, mode, added = write.table, handle, write.schema, write.mode, staged
        removing, properties, write_id = {f.file_path for f in removed}, write.properties, write.write_id
        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            ice = loaded if attempt == 1 and loaded is not None else self._open(table) or self._create(table, schema)
            tx = ice.transaction()
            # `tx.table_metadata` deep-copies the whole metadata on every read (pyiceberg): read it once, after
            # the schema change. The properties set below (name mapping, manifest merging) change nothing the
            # rest reads (schema, spec, snapshots, the statistics' metrics properties).
            metadata = ice.metadata
            if _spark_schema(metadata.schema()) != schema:
                _evolve(tx, schema, replace=mode.schema == "overwrite")
                metadata = tx.table_metadata
            if metadata.name_mapping() is None or mode.schema != "strict":
                mapping = metadata.schema().name_mapping.model_dump_json()
                tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
            current = metadata.current_snapshot()
            current_files = {}
            if current is not None and (removing or write.replaces_all):  # one plan of the snapshot
                current_files = {f.file_path: f for f in _data_files(ice, current, table)}
            if write.replaces_all and current is not None:
                removing = set(current_files)
            datafiles = [parquet_file_to_data_file(ice.io, metadata, path) for path in added]
            if missing := removing - current_files.keys():
                raise RuntimeError(f"{table!r} changed while writing: {len(missing)} file(s) to replace are gone")
            if not removing and _MERGE_MANIFESTS not in metadata.properties:
                # Iceberg's default, made explicit: pyiceberg's merge append reads an absent property as off
                tx.set_properties({_MERGE_MANIFESTS: "true"})
            update = tx.update_snapshot(snapshot_properties=properties)
            with update.overwrite() if removing else update.merge_append() as producer:
                for path in sorted(removing):
                    producer.delete_data_file(current_files[path])
                for datafile in datafiles:
                    producer.append_data_file(datafile)
            try:
                committed = tx.commit_transaction()
            except CommitFailedException:
                if not isinstance(mode, Append | Overwrite) or attempt == _COMMIT_ATTEMPTS:
                    raise
                logger.info("%s: commit lost a race with another writer (attempt %d); retrying", table, attempt)
                continue
            for snapshot in reversed(committed.metadata.snapshots):
                if snapshot.summary is not None and snapshot.summary.get(WRITE_KEY) == write_id:
                    return _sequence(snapshot)
            raise RuntimeError(f"the commit of write {write_id} is not in the metadata of {table!r}")
        raise AssertionError("unreachable: the last attempt re-raises")


def _evolve(tx: Any, schema: StructType, *, replace: bool) -> None:
    """Add the columns `schema` has and the table lacks (and with `replace`, drop the ones it no longer has)."""
    target = _arrow_schema(schema)
    with tx.update_schema() as update:
        if replace:
            for name in set(tx.table_metadata.schema().column_names) - set(target.names):
                if "." not in name:
                    update.delete_column(name)
        update.union_by_name(target)


def _ancestors(ice: Table) -> Iterable[Snapshot]:
    """The current snapshot and its ancestors, newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    return ancestors_of(ice.current_snapshot(), ice.metadata)


def _tagged_sequence(ice: Table, *, app_id: str, barrier: int) -> int | None:
    """The sequence number of `app_id`'s snapshot for `barrier` in the current line of snapshots."""
    for snapshot in _ancestors(ice):
        summary = snapshot.summary
        if summary is None or summary.get(JOB_KEY) != app_id:
            continue
        tagged = summary.get(BARRIER_KEY)
        if tagged == str(barrier):
            return _sequence(snapshot)
        if tagged is not None and tagged.isdigit() and int(tagged) < barrier:
            return None  # a job commits its barriers in order: older ones follow
    return None


def _sequence(snapshot: Snapshot) -> int:
    """The snapshot's sequence number: the snapshot id MetaService sees (format version 2 tables have one)."""
    if snapshot.sequence_number is None:
        raise UnsupportedTable(
            f"snapshot {snapshot.snapshot_id} has no sequence number (an Iceberg format version 1 table); "
            "upgrade the table to format version 2"
        )
    return snapshot.sequence_number


def _snapshot(ice: Table, table: str, sequence: int) -> Snapshot:
    for snapshot in ice.metadata.snapshots:
        if snapshot.sequence_number == sequence:  # None in format version 1: never equal
            return snapshot
    raise ValueError(f"{table!r} has no snapshot {sequence} (sequence numbers it holds: {_held(ice)})")


def _held(ice: Table) -> str:
    numbers = sorted(s.sequence_number for s in ice.metadata.snapshots if s.sequence_number is not None)
    return "none" if not numbers else f"{numbers[0]}…{numbers[-1]}" if len(numbers) > 5 else str(numbers)


def _schema_of(ice: Table, snapshot: Snapshot) -> Any:
    schemas = ice.metadata.schemas
    return next((s for s in schemas if s.schema_id == snapshot.schema_id), ice.schema())


def _data_files(ice: Table, snapshot: Snapshot, table: str) -> list[DataFile]:
    """The data files of `snapshot`; UnsupportedTable when a list of files alone would read it wrong."""
    tasks = list(ice.scan(snapshot_id=snapshot.snapshot_id).plan_files())
    if any(task.delete_files for task in tasks):
        raise UnsupportedTable(f"{table!r} has delete files at this snapshot; this catalog reads copy-on-write tables")
    _check_names(ice, table)
    return [task.file for task in tasks]


def _check_names(ice: Table, table: str) -> None:
    """Spark reads parquet columns by name: every field id must have had one name in every schema."""
    from pyiceberg.schema import index_name_by_id

    names: dict[int, str] = {}
    for schema in ice.metadata.schemas:
        for field_id, name in index_name_by_id(schema).items():
            if names.setdefault(field_id, name) != name:
                raise UnsupportedTable(
                    f"{table!r} renamed column {names[field_id]!r} to {name!r}; read it with pyiceberg"
                )


def _check_writable(ice: Table, table: str) -> None:
    if not ice.spec().is_unpartitioned():
        raise UnsupportedTable(f"{table!r} is partitioned; this catalog writes unpartitioned Iceberg tables")


def _referenced(lake: LakeRoot, ice: Table, snapshots: Iterable[Snapshot]) -> tuple[set[str], set[str]]:
    """Data files, and manifest and manifest-list files, that `snapshots` reference (the driver's paths)."""
    data: set[str] = set()
    meta: set[str] = set()
    seen: set[str] = set()
    for snapshot in snapshots:
        meta.add(lake.driver_path(snapshot.manifest_list))
        for manifest in snapshot.manifests(ice.io):
            meta.add(lake.driver_path(manifest.manifest_path))
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(ice.io, discard_deleted=True):
                data.add(lake.driver_path(entry.data_file.file_path))
    return data, meta


def _pyarrow_files(io: FileIO, location: str) -> Files:
    """The files under `location` through pyiceberg's own FileIO (the same credentials and endpoint as its
    commits)."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    if not isinstance(io, PyArrowFileIO):
        raise TypeError(
            f"the catalog's FileIO is {type(io).__name__}; listing and vacuum on an object store use pyiceberg's "
            "PyArrowFileIO (the default: leave py-io-impl unset)"
        )
    scheme, netloc, _ = io.parse_location(location)
    return Files(io.fs_by_scheme(scheme, netloc), lambda path: io.parse_location(path)[2])


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _spark_schema(schema: Any) -> StructType:
    """An Iceberg schema as Spark sees it (strings and binaries as Spark's own types)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema.as_arrow(), prefer_timestamp_ntz=True)
