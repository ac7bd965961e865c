"""`spark.readStream.format("metaservice")`: a PySpark Python data source (no JVM jar) that reads one input
of a streaming job one barrier per micro-batch.

Each `latestOffset` asks MetaService `next` for the job (reporting the newest snapshots of its root inputs, so
new root data leads to a new barrier) and answers an offset carrying the barrier, the snapshot range of every
input and the baseline of every sink. Spark journals that offset before the micro-batch runs; the rows of the
micro-batch are the parquet files the input's snapshot has and the previous one lacks, read by Arrow in the
executors. A restart from the checkpoint replays the journaled offset: the same barrier, the same files.

With the option `rows=false` the source only plans: its micro-batches carry the offsets and no rows, and the
job reads each barrier's files itself with Spark's parquet reader (`StreamingJob.start_stateless`). Handing
rows from Python workers to Spark costs 0.1-0.3 CPU-seconds per million rows of three columns on top of
Spark's own reader (docs/measurements.md, 2026-12-02); a stateless query need not pay it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
except ImportError as exc:  # pyspark < 4.2: no Python stream source with admission control
    import pyspark

    raise ImportError(
        f"spark_client.streaming needs pyspark 4.2 or later (Python stream sources with admission control and "
        f"availableNow); pyspark {pyspark.__version__} is installed"
    ) from exc

from spark_client.catalog.base import NotAppendOnly
from spark_client.errors import NotInFlight
from spark_client.models import StartAt, check_start
from spark_client.streaming._catalogs import added_files, catalog_from_spec, snapshot_files
from spark_client.streaming._offsets import BarrierOffset

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from spark_client._http import MetaServiceClient
    from spark_client.catalog.base import Catalog

logger = logging.getLogger("spark_client.streaming")

NAME = "metaservice"
"""The format name: `spark.readStream.format("metaservice")`."""
ON_REWRITE = ("fail", "full", "abort")
REQUIRED = ("job_id", "table", "url", "catalog")
FILES_PER_PARTITION = 8
PARALLELISM = 2  # read tasks a micro-batch spreads its files over at least, when the session does not say


class FilesPartition(InputPartition):
    """The parquet files one Spark task reads."""

    def __init__(self, files: Sequence[str]) -> None:
        super().__init__(list(files))
        self.files = list(files)


class MetaServiceDataSource(DataSource):
    """The `metaservice` stream source. Options (set by `StreamingJob.read`, which is the way to use it):

    - `job_id`: the streaming job (registered in MetaService with this input as a source).
    - `table`: the input this stream reads.
    - `url`: MetaService's base URL (a token comes from `METASERVICE_TOKEN` in the environment).
    - `catalog`: the catalog as JSON (`spark_client.streaming._catalogs.catalog_spec`).
    - `roots`: JSON list of the job's root inputs, whose newest snapshots `next` reports.
    - `start`: "newest" (default), "earliest" or a barrier value, for a job that never settled a barrier.
    - `on_rewrite`: "fail" (default), "full" or "abort": what a micro-batch does when its input was
      overwritten, merged or restored since the previous barrier (as `Inputs.changes`).
    - `openlineage_parent`: the OpenLineage parent run sent with `next` and abort (as `EtlJob`'s); empty: none.
    - `rows`: "true" (default) or "false": plan only, micro-batches without rows (the job reads the files).
    """

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        raise ValueError(
            "the metaservice stream source needs the input's schema: read it with StreamingJob.read(table), "
            "which passes it, or give .schema(...) on readStream"
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        missing = [key for key in REQUIRED if not self.options.get(key)]
        if missing:
            raise ValueError(f"the metaservice stream source needs the options {missing} (see StreamingJob.read)")
        return BarrierStreamReader(dict(self.options), schema)


class BarrierStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One barrier per micro-batch (see the module docstring). Runs in Spark's Python workers."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.job_id, self.table, self.url = options["job_id"], options["table"], options["url"]
        self.catalog_json = options["catalog"]
        self.roots: list[str] = json.loads(options.get("roots") or "[]")
        start = options.get("start") or "newest"
        self.start: StartAt = check_start(int(start) if start.lstrip("-").isdigit() else start)
        self.on_rewrite = options.get("on_rewrite") or "fail"
        if self.on_rewrite not in ON_REWRITE:
            raise ValueError(f"on_rewrite must be one of {list(ON_REWRITE)}, got {self.on_rewrite!r}")
        self.files_per_partition = int(options.get("files_per_partition") or FILES_PER_PARTITION)
        self.parallelism = int(options.get("parallelism") or PARALLELISM)
        self.openlineage_parent = options.get("openlineage_parent") or None
        rows = (options.get("rows") or "true").lower()
        if rows not in ("true", "false"):
            raise ValueError(f"rows must be 'true' or 'false', got {rows!r}")
        self.rows = rows == "true"
        self.schema = schema
        self._frozen_roots: dict[str, int] | None = None  # availableNow: the root snapshots at its start
        self._gave_up = False  # a micro-batch of this run gave its barrier up (on_rewrite="abort")
        self._client: MetaServiceClient | None = None
        self._catalog: Catalog | None = None

    def __getstate__(self) -> dict[str, Any]:  # the reader is pickled to the executors: no connections
        state = dict(self.__dict__)
        state["_client"] = state["_catalog"] = None
        return state

    @property
    def client(self) -> MetaServiceClient:
        if self._client is None:
            # imported here: only the driver's source process calls MetaService; Spark's planner processes and
            # the executors' readers import this module and need not load the HTTP stack (about 0.16 s)
            from spark_client._http import MetaServiceClient

            self._client = MetaServiceClient(self.url)
        return self._client

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = catalog_from_spec(self.catalog_json)
        return self._catalog

    def initialOffset(self) -> dict[str, Any]:
        return BarrierOffset(self.job_id, self.table).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: report the roots' snapshots of now with every `next`, so the query processes the
        barriers that seal data present now, then stops. A barrier given up (`on_rewrite="abort"`) ends the run:
        the server offers its rows again in the next barrier, which would be given up again for as long as the
        rewrite stands, one micro-batch after another, and the run would never stop; the next run tries again."""
        self._frozen_roots = self._root_snapshots()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        del limit  # one barrier per micro-batch whatever the limit
        if self._gave_up and self._frozen_roots is not None:
            return start  # availableNow: see prepareForTriggerAvailableNow
        previous = BarrierOffset.from_json(start)
        roots = self._frozen_roots if self._frozen_roots is not None else self._root_snapshots()
        decision = self.client.next_barrier(
            self.job_id, roots, start=self.start, openlineage_parent=self.openlineage_parent
        )
        if decision.action != "process" or decision.barrier is None or decision.barrier == previous.barrier:
            return start
        if self.table not in decision.inputs:
            raise ValueError(
                f"job {self.job_id!r}: MetaService hands out no snapshot of {self.table!r} for barrier "
                f"{decision.barrier}; the stream reads a table that is not a registered source of the job "
                f"(its sources: {sorted(decision.inputs)}). Register it (StreamingJob.register) and restart"
            )
        return BarrierOffset.of(decision, self.table).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        offset = BarrierOffset.from_json(end)
        if not self.rows or offset.barrier == 0 or offset.barrier == BarrierOffset.from_json(start).barrier:
            return []
        groups = spread(self._files(offset), self.parallelism, self.files_per_partition)
        return [FilesPartition(group) for group in groups]

    def _files(self, offset: BarrierOffset) -> list[str]:
        span = offset.inputs[self.table]
        try:
            return added_files(self.catalog, self.table, after=span.previous, snapshot_id=span.snapshot)
        except NotAppendOnly as exc:
            where = (
                f"job {self.job_id!r}, barrier {offset.barrier}: input {self.table!r} was rewritten between "
                f"snapshots {span.previous} and {span.snapshot}"
            )
            if self.on_rewrite == "full":
                logger.warning("%s; reading it whole for this barrier (on_rewrite='full')", where)
                return snapshot_files(self.catalog, self.table, span.snapshot)
            if self.on_rewrite == "abort":
                with contextlib.suppress(NotInFlight):  # aborted already: a replay of this micro-batch
                    self.client.abort_barrier(
                        self.job_id,
                        offset.barrier,
                        reason=f"{where} (on_rewrite='abort')",
                        openlineage_parent=self.openlineage_parent,
                    )
                logger.warning("%s; gave the barrier up (on_rewrite='abort')", where)
                self._gave_up = True
                return []
            raise NotAppendOnly(
                f"{where} (overwritten, merged or restored), so its changes are not just new rows. Choose what "
                "the job does then: StreamingJob.read(..., on_rewrite='full') reads it whole for this barrier "
                "(write with Merge or OverwritePartitions so old rows do not land twice), on_rewrite='abort' "
                "gives the barrier up. The barrier stays in flight; restart the query from its checkpoint.",
                table=self.table,
                after_snapshot_id=span.previous,
                snapshot_id=span.snapshot,
            ) from exc

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import pyarrow.dataset as pads
        from pyspark.sql.pandas.types import to_arrow_schema

        freeze_worker_objects()
        assert isinstance(partition, FilesPartition)
        schema = to_arrow_schema(self.schema, timezone="UTC")
        dataset = pads.dataset(partition.files, schema=schema, format="parquet")
        yield from dataset.to_batches()

    def commit(self, end: dict[str, Any]) -> None:
        pass  # the sink reports each barrier to MetaService; nothing to release here

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()

    def _root_snapshots(self) -> dict[str, int]:
        snapshots = {}
        for table in self.roots:
            latest = self.catalog.latest_snapshot(table)
            if latest is not None:
                snapshots[table] = latest
        return snapshots


_WORKER_FROZEN = False


def freeze_worker_objects() -> None:
    """Move the objects of this Python worker to the collector's permanent generation, once per process.

    pyspark's daemon runs `gc.collect()` after every task of a reused worker. With pyspark, pyarrow and this
    package loaded, that is a full collection over about 78,000 objects: 40-55 ms of CPU per task, more than a
    task's own Python work on a barrier of a few files (docs/measurements.md, 2026-12-02). The objects alive
    once the reader's modules are imported are the worker's modules and the like, which live as long as the
    process; frozen, the collection after each task looks only at what later tasks made (about 250 objects,
    0.1 ms). Objects frozen here are never freed by the cyclic collector (reference counting still frees them):
    at most one task's setup, once per process. Later tasks' garbage is collected as before.

    Example:
        freeze_worker_objects()   # the first read in a worker process; a no-op afterwards
    """
    global _WORKER_FROZEN
    if not _WORKER_FROZEN:
        gc.freeze()
        _WORKER_FROZEN = True


def spread(files: Sequence[str], parallelism: int, most: int) -> list[list[str]]:
    """`files` in contiguous groups, one per read task: at least `parallelism` groups (when there are as many
    files), so that a barrier of a few big files is read by every core and not by one, and at most `most` files
    in a group.

    Example:
        assert spread(["a", "b", "c"], 2, 8) == [["a", "b"], ["c"]]
    """
    if not files:
        return []
    groups = max(min(len(files), parallelism), -(-len(files) // max(1, most)))
    size = -(-len(files) // groups)
    return [list(files[i : i + size]) for i in range(0, len(files), size)]


def register_stream_source(spark: SparkSession) -> None:
    """Make `spark.readStream.format("metaservice")` available in `spark` (idempotent).

    Example:
        register_stream_source(spark)
    """
    spark.dataSource.register(MetaServiceDataSource)
