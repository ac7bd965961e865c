"""Delta tables written by Spark's parquet writer and committed to the Delta log by `deltalake` from the driver.

No Delta jars are needed in Spark; the tables are ordinary Delta tables any Delta reader can open. Each commit
of a job carries an app transaction (txnAppId = job id, txnVersion = barrier) and commit metadata naming the
barrier and the job, so a job that crashed after committing finds its own commit instead of writing twice.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from spark_client import _failpoints

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_client._http import MetaServiceClient

_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$")
BARRIER_KEY, JOB_KEY = "metaservice.barrier", "metaservice.job_id"


class SchemaMismatch(ValueError):
    """A write whose columns or types differ from the table's schema."""


class NotAppendOnly(ValueError):
    """Incremental reads of a table whose files were removed (overwritten) in between."""


class DeltaCatalog:
    """Delta tables under one warehouse root: `lake.sales.orders` lives at `<root>/lake/sales/orders`.

    Example:
        catalog = DeltaCatalog("/data/lake")
        version = catalog.append(spark, df, "lake.raw.orders")
        catalog.read_at(spark, "lake.raw.orders", version).count()
    """

    format = "delta"

    def __init__(self, root: str | Path) -> None:
        self.root = str(Path(root).resolve())

    def location(self, table: str) -> str:
        """The directory of `table`. Raises ValueError for a malformed name."""
        parts = table.split(".")
        if len(parts) != 3 or not all(_PART.match(p) for p in parts):
            raise ValueError(f"table names are catalog.database.table with parts {_PART.pattern}: {table!r}")
        return os.path.join(self.root, *parts)

    def latest_snapshot(self, table: str) -> int | None:
        """The newest Delta version of `table`, or None when it does not exist yet."""
        table_ = self._open(table)
        return None if table_ is None else int(table_.version())

    def append(self, spark: SparkSession, df: DataFrame, table: str) -> int:
        """Commit `df` as new rows of `table` (root tables, ingestion, tests); returns the new version."""
        return self.write(spark, df, table, mode="append")

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
        """Write `df` with Spark's parquet writer into the table directory, then commit the files to the log.

        Args:
            mode: "append" adds the rows; "overwrite" logically removes the previous files.
            app_id, barrier: tag the commit with the app transaction (app_id, barrier) and commit metadata.
            metadata: more commit metadata.

        Returns:
            The new Delta version.

        Raises:
            SchemaMismatch: the DataFrame's schema differs from the table's; nothing is committed.
        """
        del spark  # the DataFrame carries its session
        location = self.location(table)
        arrow_schema = _arrow_schema(df)
        existing = self._open(table)
        if existing is not None:
            _check_schema(table, pa.schema(existing.schema().to_arrow()), arrow_schema)
        relative = f"data/{uuid.uuid4().hex}"
        staging = os.path.join(location, relative)
        df.write.mode("error").parquet(staging)
        _failpoints.hit("after_files_written")
        actions = _add_actions(staging, relative)
        if existing is None:
            existing = DeltaTable.create(location, schema=arrow_schema, mode="ignore")
        custom: dict[str, Any] = dict(metadata or {})
        transactions = []
        if app_id is not None and barrier is not None:
            custom.update({BARRIER_KEY: str(barrier), JOB_KEY: app_id})
            transactions.append(Transaction(app_id, barrier))
        existing.create_write_transaction(
            list[AddAction | RemoveAction](actions),
            mode,
            arrow_schema,
            commit_properties=CommitProperties(custom_metadata=custom or None, app_transactions=transactions or None),
        )
        existing.update_incremental()
        version = int(existing.version())
        if app_id is not None:
            _failpoints.hit("after_delta_commit")
        return version

    def committed_snapshot(self, table: str, *, app_id: str, barrier: int) -> int | None:
        """The version this job committed for `barrier` earlier (a crash before reporting it), or None."""
        table_ = self._open(table)
        if table_ is None:
            return None
        done = table_.transaction_version(app_id)
        if done is None or done < barrier:
            return None
        for commit in table_.history():
            if commit.get("operation") == "RESTORE":
                return None  # commits before a rollback's restore were undone: recompute
            if commit.get(BARRIER_KEY) == str(barrier) and commit.get(JOB_KEY) == app_id:
                return int(commit["version"])
        return None

    def restore(self, table: str, snapshot_id: int, *, metadata: Mapping[str, str] | None = None) -> int:
        """Make `table` hold the data of version `snapshot_id` again (a new version); returns that new version.

        Example:
            catalog.restore("lake.mart.orders_enriched", 4)
        """
        table_ = DeltaTable(self.location(table))
        table_.restore(snapshot_id, commit_properties=CommitProperties(custom_metadata=dict(metadata or {}) or None))
        table_.update_incremental()
        return int(table_.version())

    def vacuum(
        self, table: str, client: MetaServiceClient, *, min_orphan_age_seconds: float = 3600, dry_run: bool = False
    ) -> list[str]:
        """Delete data files that no protected version of `table` needs; returns the paths deleted (or to delete).

        MetaService names the oldest protected snapshot (in-flight job inputs, live leases, the strong version,
        the newest). Every file of every version from that one to the newest is kept. Files no version
        references (a write that crashed before its log commit) are deleted only when older than
        `min_orphan_age_seconds`, so a write in progress is never touched.

        Example:
            deleted = catalog.vacuum("lake.mart.orders_enriched", client)
        """
        location = self.location(table)
        table_ = DeltaTable(location)
        newest = int(table_.version())
        oldest = client.retention(table).oldest_protected_snapshot_id
        floor = newest if oldest is None else min(int(oldest), newest)
        keep: set[str] = set()
        for version in range(floor, newest + 1):
            keep.update(os.path.normpath(p) for p in DeltaTable(location, version=version).file_uris())
        ever = {os.path.normpath(os.path.join(location, a["path"])) for a in _all_add_paths(location)}
        cutoff = time.time() - min_orphan_age_seconds
        doomed = []
        for root, _dirs, files in os.walk(location):
            if "_delta_log" in root.split(os.sep):
                continue
            for name in files:
                path = os.path.normpath(os.path.join(root, name))
                if not name.endswith(".parquet") or path in keep:
                    continue
                if path in ever or os.stat(path).st_mtime < cutoff:
                    doomed.append(path)
        if not dry_run:
            for path in doomed:
                os.remove(path)
        return sorted(doomed)

    def read_at(self, spark: SparkSession, table: str, snapshot_id: int) -> DataFrame:
        """`table` exactly as of Delta version `snapshot_id`: Spark reads that version's file list."""
        version = DeltaTable(self.location(table), version=snapshot_id)
        files = version.file_uris()
        if not files:
            from pyspark.sql.pandas.types import from_arrow_schema

            return spark.createDataFrame([], from_arrow_schema(pa.schema(version.schema().to_arrow())))
        return spark.read.parquet(*files)

    def read_changes(
        self, spark: SparkSession, table: str, *, after_snapshot_id: int | None, snapshot_id: int
    ) -> DataFrame:
        """Rows added after version `after_snapshot_id` up to `snapshot_id` (all rows when it is None).

        Raises:
            NotAppendOnly: files were removed in between (the table was overwritten).
        """
        if after_snapshot_id is None:
            return self.read_at(spark, table, snapshot_id)
        location = self.location(table)
        now = set(DeltaTable(location, version=snapshot_id).file_uris())
        before = set(DeltaTable(location, version=after_snapshot_id).file_uris())
        if not before <= now:
            raise NotAppendOnly(f"{table!r} lost files between versions {after_snapshot_id} and {snapshot_id}")
        added = sorted(now - before)
        if not added:
            return self.read_at(spark, table, snapshot_id).limit(0)
        return spark.read.parquet(*added)

    def history(self, table: str) -> list[dict[str, Any]]:
        """Commits of `table`, newest first, with their barrier and job tags when they have them."""
        table_ = self._open(table)
        return [] if table_ is None else list(table_.history())

    def _open(self, table: str) -> DeltaTable | None:
        try:
            return DeltaTable(self.location(table))
        except TableNotFoundError:
            return None


def _arrow_schema(df: DataFrame) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema)


def _check_schema(table: str, expected: pa.Schema, actual: pa.Schema) -> None:
    want = {f.name: str(f.type) for f in expected}
    got = {f.name: str(f.type) for f in actual}
    if want != got:
        diff = sorted(
            f"{name}: {want.get(name, 'missing')} → {got.get(name, 'missing')}"
            for name in set(want) | set(got)
            if want.get(name) != got.get(name)
        )
        raise SchemaMismatch(f"schema of {table!r} differs: {'; '.join(diff)}")


def _add_actions(staging: str, relative: str) -> list[AddAction]:
    """One AddAction per parquet file Spark wrote; row counts come from the footers only."""
    actions = []
    for entry in os.scandir(staging):
        if not entry.name.endswith(".parquet"):
            continue
        stat = entry.stat()
        rows = pq.read_metadata(entry.path).num_rows
        actions.append(
            AddAction(
                f"{relative}/{entry.name}",
                stat.st_size,
                {},
                int(stat.st_mtime * 1000),
                True,
                json.dumps({"numRecords": rows}),
            )
        )
    return actions


def _all_add_paths(location: str) -> list[dict[str, Any]]:
    """Every file ever added to the table, read from the JSON commits of its log."""
    log = os.path.join(location, "_delta_log")
    adds: list[dict[str, Any]] = []
    for name in sorted(os.listdir(log)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(log, name)) as commit:
            for line in commit:
                action = json.loads(line)
                if "add" in action:
                    adds.append(action["add"])
    return adds
