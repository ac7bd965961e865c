"""StreamingJob: a Structured Streaming query whose micro-batches are MetaService barriers.

The query reads its inputs with the `metaservice` stream source (one barrier per micro-batch, see
`spark_client.streaming.source`) and writes through `foreachBatch`: the micro-batch's barrier comes from the
offset Spark journaled for it in the checkpoint, each sink is written through the same catalog calls as a batch
job (tagged with the job and the barrier), and the barrier is committed to MetaService in the same
micro-batch. A replayed micro-batch finds its tagged commits in the sinks and its commit on the server, so it
writes nothing twice.

Two paths: `start(frame)` runs a streaming DataFrame built from `read` streams, whose rows flow through the
source's Python readers (any query, stateful ones included); `start_stateless(transform)` runs a batch job's
transform once per micro-batch on the barrier's inputs, read by Spark's own parquet reader, while the source
only plans (the same offsets, checkpoint, triggers and exactly-once replay, without the Python row transfer).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from spark_client import _failpoints
from spark_client._http import MetaServiceClient, StartAt, check_start
from spark_client.catalog.base import Catalog
from spark_client.errors import InvalidTransformResult, NotInFlight, PermanentFailure, UnsafeWriteMode
from spark_client.inputs import Inputs
from spark_client.job import UNDO_KEY, EtlJob, Transform, plan_sink
from spark_client.models import InputSnapshot
from spark_client.modes import ModeSpec, Overwrite, WriteMode, resolve
from spark_client.streaming import source as _source
from spark_client.streaming._catalogs import catalog_spec
from spark_client.streaming._offsets import BarrierOffset, journaled_offsets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

logger = logging.getLogger("spark_client.streaming")

OutputMode = Literal["append", "update", "complete"]
Split = Callable[["DataFrame"], Mapping[str, "DataFrame"]]
Frames = Callable[[BarrierOffset], Mapping[str, "DataFrame"]]  # a micro-batch's barrier → one frame per sink
SUPPORTED_TRIGGERS = ("processingTime", "availableNow")
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
PLAN_SCHEMA = "barrier long"  # the plan-only stream's schema: it never yields a row


class _GiveUp(Exception):
    """A stateless transform raised `PermanentFailure` (the cause): the micro-batch aborts its barrier."""

    def __init__(self, failure: PermanentFailure) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.reason = f"{type(failure).__name__}: {failure}"[:2000]


class UnsupportedTrigger(ValueError):
    """A trigger a streaming job cannot run with (only `processingTime` and `availableNow` are supported).

    Example:
        job.start(frame, trigger={"availableNow": True})
    """


class CheckpointAfterRollback(RuntimeError):
    """The checkpoint holds state built from barriers a rollback undid in a sink; nothing was started.

    Start the query with a new checkpoint (a full refresh: the job recomputes from its `start`), after emptying or
    restoring its sinks as the rollback left them.
    """


class UnexpectedMicroBatch(RuntimeError):
    """A micro-batch the job cannot map to exactly one barrier (sources at different barriers, a no-data batch
    with rows, a checkpoint without the offsets of the `metaservice` source); nothing was written."""


@dataclass(frozen=True)
class BatchResult:
    """What one micro-batch did.

    Attributes:
        batch_id: Spark's micro-batch id.
        barrier: the barrier it processed.
        action: "process" (committed), "replayed" (a replay that found the barrier committed: nothing was
            written) or "aborted" (the server gave the barrier up, or a stateless transform did with
            `PermanentFailure`; what was written for it is undone).
        snapshots: sink → the snapshot committed for the barrier.
        reused: sinks whose tagged commit for the barrier was found in storage (a crash after the table commit).
        seconds: how long the micro-batch's writes and commit took.
    """

    batch_id: int
    barrier: int
    action: Literal["process", "replayed", "aborted"]
    snapshots: Mapping[str, int] = field(default_factory=dict)
    reused: tuple[str, ...] = ()
    seconds: float = 0.0


def _last_committed_batch(checkpoint: str) -> int | None:
    """The newest micro-batch Spark recorded done in the checkpoint's commit log, or None."""
    try:
        names = os.listdir(os.path.join(checkpoint, "commits"))
    except FileNotFoundError:
        return None
    done = [int(name) for name in names if name.isdigit()]
    return max(done) if done else None


def _drain(df: DataFrame) -> None:
    """Run the micro-batch's plan to the end without writing anything: a stateful query's state stores commit
    only when every partition was processed (Spark refuses the batch otherwise), and a replayed micro-batch
    whose commits are all in storage already writes nothing."""
    df.write.format("noop").mode("overwrite").save()


def check_trigger(trigger: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keyword arguments for `DataStreamWriter.trigger`, if the trigger is supported.

    Args:
        trigger: `{"processingTime": "1 second"}` (None: the same) or `{"availableNow": True}`.

    Raises:
        UnsupportedTrigger: any other trigger (once, continuous, several at once, a false availableNow).

    Example:
        assert check_trigger({"availableNow": True}) == {"availableNow": True}
    """
    if trigger is None:
        return {"processingTime": "1 second"}
    supported = "processingTime='<interval>' (e.g. '1 second') or availableNow=True"
    if not isinstance(trigger, Mapping) or len(trigger) != 1:
        raise UnsupportedTrigger(f"a streaming job runs with one trigger, {supported}; got {trigger!r}")
    ((name, value),) = trigger.items()
    if name == "processingTime" and isinstance(value, str) and value.strip():
        return {"processingTime": value}
    if name == "availableNow" and value is True:
        return {"availableNow": True}
    raise UnsupportedTrigger(
        f"trigger {name}={value!r} is not supported by a streaming job: each micro-batch is one barrier, so the "
        f"supported triggers are {supported}"
    )


class StreamingJob:
    """A streaming ETL job: a Structured Streaming query that processes one barrier per micro-batch.

    Args:
        spark: the session that runs the query.
        client: the MetaService client (its base URL is handed to the stream source; a token comes from
            `METASERVICE_TOKEN`, which Spark's Python workers inherit).
        catalog: where the tables live (Delta, Iceberg with `uri`, Paimon, or a `RoutingCatalog` of them).
        job_id: the job, as for `EtlJob`.
        sources: the tables it reads as streams; at least one.
        sinks: the tables it writes.
        checkpoint: the query's checkpoint directory (local); a restart continues from it.
        start: where the first barrier is, as for `EtlJob` ("newest", "earliest" or a barrier).
        openlineage_parent: the OpenLineage run that started the query, as for `EtlJob` (default: the
            environment variable `OPENLINEAGE_PARENT_ID`); every micro-batch's run names it as its parent.

    Raises:
        ValueError: no sources, or what `EtlJob` refuses (a malformed `openlineage_parent` among it).

    Example:
        job = StreamingJob(spark, client, catalog, job_id="silver", sources=["lake.raw.orders"],
                           sinks=["lake.mart.orders"], checkpoint="/chk/silver", start="earliest")
        job.register()
        orders = job.read("lake.raw.orders")
        query = job.start(orders.where("qty > 0"), mode=Append(), trigger={"processingTime": "1 second"})
    """

    def __init__(
        self,
        spark: SparkSession,
        client: MetaServiceClient,
        catalog: Catalog,
        *,
        job_id: str,
        sources: Sequence[str],
        sinks: Sequence[str],
        checkpoint: str | os.PathLike[str],
        start: StartAt = "newest",
        future_roots: Sequence[str] = (),
        openlineage_parent: str | None = None,
    ) -> None:
        if not sources:
            raise ValueError(f"streaming job {job_id!r} needs at least one source to read as a stream")
        # future_roots: as for EtlJob, sources an outside writer will create (register refuses unknown names)
        self._batch = EtlJob(
            spark,
            client,
            catalog,
            job_id=job_id,
            sources=sources,
            sinks=sinks,
            start=start,
            future_roots=future_roots,
            openlineage_parent=openlineage_parent,
        )
        self.openlineage_parent = self._batch.openlineage_parent
        self.spark, self.client, self.catalog = spark, client, catalog
        self.job_id, self.sources, self.sinks = job_id, list(sources), list(sinks)
        self.checkpoint = os.path.abspath(os.fspath(checkpoint))
        self.start_at: StartAt = check_start(start)
        self._catalog_json = catalog_spec(catalog)  # TypeError now, not in a Python worker later
        self._roots: list[str] | None = None
        self.history: list[BatchResult] = []
        """Every micro-batch this object wrote, oldest first."""

    def __repr__(self) -> str:
        return f"StreamingJob({self.job_id!r}, sources={self.sources}, sinks={self.sinks})"

    def register(self) -> None:
        """Register every source and sink (idempotent), and make the `metaservice` stream source available.

        Example:
            job.register()
        """
        self._batch.register()
        self._roots = [t for t in self.sources if self.client.get_table(t).get("kind") == "root"]
        _source.register_stream_source(self.spark)

    def read(
        self,
        table: str,
        *,
        on_rewrite: Literal["fail", "full", "abort"] = "fail",
        columns: Sequence[str] | None = None,
    ) -> DataFrame:
        """`table` as a stream: one micro-batch per barrier, holding the rows added since the previous barrier.

        Args:
            table: a source of the job; it must hold a snapshot (its schema is the stream's).
            on_rewrite: when the input was overwritten, merged or restored since the previous barrier: "fail"
                (the query stops with `NotAppendOnly`; the barrier stays in flight), "full" (the micro-batch
                reads it whole: write with Merge or OverwritePartitions), "abort" (the barrier is given up).
            columns: the columns the query needs, in this order (default: all). Spark cannot prune the columns
                of a Python data source, and handing rows from Python to Spark costs in proportion to the
                columns, so a query that needs a few of a wide table's columns names them here.

        Raises:
            KeyError: not a source of the job, or a column the table lacks. ValueError: the table holds no
                snapshot yet.

        Example:
            orders = job.read("lake.raw.orders", on_rewrite="full", columns=["order_id", "qty", "at"])
        """
        if table not in self.sources:
            raise KeyError(f"{table!r} is not a source of streaming job {self.job_id!r}; sources: {self.sources}")
        if on_rewrite not in _source.ON_REWRITE:
            raise ValueError(f"on_rewrite must be one of {list(_source.ON_REWRITE)}, got {on_rewrite!r}")
        if self._roots is None:
            self.register()
        latest = self.catalog.latest_snapshot(table)
        if latest is None:
            raise ValueError(
                f"streaming job {self.job_id!r}: {table!r} holds no snapshot yet, so its schema is unknown; "
                "write it once (a root: append to it; a job's output: run that job) and start the query then"
            )
        schema = self.catalog.read_at(self.spark, table, latest).schema
        if columns is not None:
            if missing := [c for c in columns if c not in schema.fieldNames()]:
                raise KeyError(f"{table!r} has no columns {missing}; its columns: {', '.join(schema.fieldNames())}")
            schema = type(schema)([schema[c] for c in columns])
        return self._stream(table, schema, on_rewrite=on_rewrite, rows=True)

    def _stream(self, table: str, schema: StructType | str, *, on_rewrite: str, rows: bool) -> DataFrame:
        """The `metaservice` stream of `table`; `rows=False`: offsets only, micro-batches without rows."""
        import json

        return (
            self.spark.readStream.format(_source.NAME)
            .schema(schema)
            .option("job_id", self.job_id)
            .option("table", table)
            .option("url", self.client.base_url)
            .option("catalog", self._catalog_json)
            .option("roots", json.dumps(self._roots or []))
            .option("start", str(self.start_at))
            .option("on_rewrite", on_rewrite)
            .option("parallelism", str(_parallelism(self.spark)))
            .option("openlineage_parent", self.openlineage_parent or "")
            .option("rows", "true" if rows else "false")
            .load()
        )

    def start(
        self,
        frame: DataFrame,
        *,
        mode: ModeSpec = "append",
        trigger: Mapping[str, Any] | None = None,
        output_mode: OutputMode = "append",
        split: Split | None = None,
        query_name: str | None = None,
    ) -> StreamingQuery:
        """Start the query writing `frame` (built from `read` streams) to the sinks, one barrier per micro-batch.

        Args:
            frame: the streaming DataFrame to write.
            mode: the write mode of every sink, or sink → mode (`Append`, `Merge`, `OverwritePartitions`,
                `ReplaceWhere`; `Overwrite` only with `output_mode="complete"`).
            trigger: `{"processingTime": "<interval>"}` (default 1 second) or `{"availableNow": True}` (process
                every barrier sealing data present now, then stop).
            output_mode: Spark's output mode: "append", "update" (write with Merge on the grouping keys) or
                "complete" (write with Overwrite).
            split: for several sinks: micro-batch DataFrame → {sink: DataFrame}. With one sink, not needed.
            query_name: the query's name (default: the job id).

        Raises:
            UnsupportedTrigger: a trigger other than processingTime or availableNow.
            UnsafeWriteMode: `Overwrite` with an output mode that delivers only part of the result.
            ValueError: several sinks without `split`, a bad mode.

        Example:
            query = job.start(frame, mode=Merge(keys=("day",)), output_mode="update",
                              trigger={"availableNow": True})
            query.awaitTermination()
        """
        kwargs = check_trigger(trigger)
        modes = resolve(mode, self.sinks, job_id=self.job_id)
        for sink, sink_mode in modes.items():
            if isinstance(sink_mode, Overwrite) and output_mode != "complete":
                raise UnsafeWriteMode(
                    f"streaming job {self.job_id!r}: sink {sink!r} is written with Overwrite, but output mode "
                    f"{output_mode!r} delivers only each micro-batch's rows, so the table would hold only the last "
                    "barrier's. Use Append, Merge or OverwritePartitions, or output_mode='complete'"
                )
        if len(self.sinks) > 1 and split is None:
            raise ValueError(
                f"streaming job {self.job_id!r} writes {self.sinks}: give split=lambda df: {{sink: df...}} to say "
                "which rows go where"
            )

        def write_batch(df: DataFrame, batch_id: int) -> None:
            self._write_batch(df, batch_id, modes, lambda offset: self._frames(df, split, offset.barrier), rows=True)

        return self._start_query(frame, write_batch, kwargs, output_mode, query_name)

    def start_stateless(
        self,
        transform: Transform,
        *,
        mode: ModeSpec = "append",
        trigger: Mapping[str, Any] | None = None,
        query_name: str | None = None,
    ) -> StreamingQuery:
        """Start a stateless query: `transform`, a batch job's transform, runs once per micro-batch on the
        barrier's inputs, which Spark's own parquet reader reads.

        The query is a Structured Streaming query like `start`'s (the same offsets, checkpoint, triggers,
        progress and exactly-once replay), but its `metaservice` stream only plans: the micro-batch's rows are
        not handed over by the source's Python readers (0.1-0.3 CPU-seconds per million rows of three columns
        more than Spark's reader, docs/measurements.md). Nothing is kept from one micro-batch to the next except
        what the sinks hold, so a query with state (an aggregation over barriers, a watermark, deduplication,
        a stream-stream join) runs with `start`. Spark reports 0 input rows for these micro-batches.

        Args:
            transform: `inputs -> {sink: DataFrame}`, as for `EtlJob.run_once`: `inputs.changes(name)` holds
                the rows added since the previous barrier (its `on_rewrite` choices as in a batch job),
                `inputs[name]` the whole input at the barrier. A `PermanentFailure` aborts the barrier, restores
                the sinks and stops the query with it, as `run_once` raises it; the restarted query moves on to
                the next barrier (the server offers what the aborted one held again).
            mode: the write mode of every sink, or sink → mode. `Overwrite` is refused for a sink of a transform
                that read an input with `changes` (it would keep only the last barrier's rows).
            trigger: `{"processingTime": "<interval>"}` (default 1 second) or `{"availableNow": True}`.
            query_name: the query's name (default: the job id).

        Raises:
            UnsupportedTrigger: a trigger other than processingTime or availableNow.
            ValueError: a bad mode.

        Example:
            def transform(inputs):
                orders = inputs.changes("lake.raw.orders")
                return {"lake.mart.orders": orders.where("qty > 0")}

            query = job.start_stateless(transform, mode=Append(), trigger={"availableNow": True})
            query.awaitTermination()
        """
        kwargs = check_trigger(trigger)
        modes = resolve(mode, self.sinks, job_id=self.job_id)
        if self._roots is None:
            self.register()
        plan = self._stream(self.sources[0], PLAN_SCHEMA, on_rewrite="fail", rows=False)

        def write_batch(df: DataFrame, batch_id: int) -> None:
            self._write_batch(
                df, batch_id, modes, lambda offset: self._transformed(transform, offset, modes), rows=False
            )

        return self._start_query(plan, write_batch, kwargs, "append", query_name)

    def _start_query(
        self,
        frame: DataFrame,
        write_batch: Callable[[DataFrame, int], None],
        trigger: Mapping[str, Any],
        output_mode: OutputMode,
        query_name: str | None,
    ) -> StreamingQuery:
        if self._roots is None:
            self.register()
        self.check_checkpoint()
        # A micro-batch without a new barrier would carry rows (watermark evictions) no barrier stands for:
        # they come with the next barrier's micro-batch instead.
        self.spark.conf.set(NO_DATA_BATCHES, "false")
        writer = (
            frame.writeStream.foreachBatch(write_batch)
            .option("checkpointLocation", self.checkpoint)
            .outputMode(output_mode)
            .queryName(query_name or self.job_id)
            .trigger(**trigger)
        )
        return writer.start()

    def check_checkpoint(self) -> None:
        """Refuse a checkpoint whose last micro-batch wrote a commit a rollback has undone since.

        Spark's state and offsets in the checkpoint include that micro-batch; continuing from them would keep
        state built from undone data. A sink was rolled back when it holds a restore this job did not make after
        the micro-batch's baseline, when it is older than that baseline, or when the micro-batch's tagged commit
        is gone.

        Raises:
            CheckpointAfterRollback: what to do instead (a new checkpoint).

        Example:
            job.check_checkpoint()   # start() calls it
        """
        last = _last_committed_batch(self.checkpoint)
        if last is None:
            return
        offsets = [o for o in journaled_offsets(self.checkpoint, last) if o.job_id == self.job_id]
        if not offsets or offsets[0].barrier == 0:
            return
        offset = offsets[0]
        for sink in self.sinks:
            if sink not in offset.sinks:
                continue
            baseline = offset.sinks[sink]
            try:
                records = self.catalog.commits_after(sink, baseline)
            except ValueError:
                records = None  # the sink is older than the micro-batch's baseline
            undone = (
                records is None
                or any(r.kind == "restore" and r.job_id != self.job_id for r in records)
                or not any(r.job_id == self.job_id for r in records)
            )
            if undone:
                raise CheckpointAfterRollback(
                    f"streaming job {self.job_id!r}: sink {sink!r} no longer holds what micro-batch {last} wrote for "
                    f"barrier {offset.barrier} (a rollback undid it), but the checkpoint {self.checkpoint} holds "
                    "Spark's state and offsets after it. Start the query with a new checkpoint (a full refresh); "
                    "nothing was started"
                )

    # -- one micro-batch ---------------------------------------------------------------------------------------

    def _barrier_of(self, batch_id: int) -> BarrierOffset:
        try:
            offsets = [o for o in journaled_offsets(self.checkpoint, batch_id) if o.job_id == self.job_id]
        except FileNotFoundError:
            offsets = []
        if not offsets:
            raise UnexpectedMicroBatch(
                f"streaming job {self.job_id!r}: micro-batch {batch_id} has no offset of the metaservice source of "
                f"this job in {self.checkpoint}/offsets; read the inputs with StreamingJob.read and use this job's "
                "checkpoint; nothing was written"
            )
        barriers = {o.barrier for o in offsets}
        if len(barriers) != 1:
            raise UnexpectedMicroBatch(
                f"streaming job {self.job_id!r}: micro-batch {batch_id} has sources at different barriers "
                f"{sorted(barriers)}; nothing was written (restart the query)"
            )
        return offsets[0]

    def _write_batch(
        self, df: DataFrame, batch_id: int, modes: Mapping[str, WriteMode], frames_of: Frames, *, rows: bool
    ) -> None:
        """Write the micro-batch's barrier to every sink and commit it. `frames_of` builds the sinks' frames;
        `rows`: `df` carries the stream's rows (stateful operators commit their state only when it is run to
        the end), else it is the plan-only stream's empty batch and is never run."""
        started = time.monotonic()
        offset = self._barrier_of(batch_id)
        barrier = offset.barrier
        if barrier == 0 or self._repeats_previous(batch_id, barrier):
            if rows:
                if barrier and not df.isEmpty():
                    raise UnexpectedMicroBatch(
                        f"streaming job {self.job_id!r}: micro-batch {batch_id} brings rows but no new barrier "
                        f"({barrier} was micro-batch {batch_id - 1}'s); set {NO_DATA_BATCHES}=false; nothing "
                        "was written"
                    )
                _drain(df)
            return
        written: dict[str, int] = {}
        reused: list[str] = []
        for sink in self.sinks:
            existing = self._prepare_sink(offset, sink)
            if existing is not None:
                written[sink] = existing
                reused.append(sink)
        pending = [sink for sink in self.sinks if sink not in written]
        if pending:
            try:
                frames = frames_of(offset)
            except _GiveUp as exc:
                aborted_now = self._give_up(offset, written, reason=exc.reason)
                self.history.append(BatchResult(batch_id, barrier, "aborted", seconds=time.monotonic() - started))
                if aborted_now:  # the query stops, as a batch job's run raises; its restart moves on
                    raise exc.failure from None
                return  # a replay of the micro-batch that gave the barrier up (or the server aborted it)
            cached = rows and (len(pending) > 1 or any(type(modes[s]).__name__ != "Append" for s in pending))
            if cached:
                df.persist()
            try:
                for sink in pending:
                    written[sink] = self.catalog.write(
                        self.spark, frames[sink], sink, mode=modes[sink], app_id=self.job_id, barrier=barrier
                    )
            finally:
                if cached:
                    df.unpersist()
        elif rows:
            _drain(df)  # a replay writes nothing, but Spark's state stores must still commit the batch
        _failpoints.hit("before_metaservice_commit")
        try:
            self.client.commit_barrier(self.job_id, barrier, written, openlineage_parent=self.openlineage_parent)
        except NotInFlight as exc:
            undone = self._undo(offset, written)
            logger.warning(
                "streaming job %s: barrier %d was aborted by the server (%s); restored %s",
                self.job_id,
                barrier,
                exc.detail,
                undone,
            )
            self.history.append(BatchResult(batch_id, barrier, "aborted", seconds=time.monotonic() - started))
            return
        _failpoints.hit("after_metaservice_commit")
        action: Literal["process", "replayed"] = "replayed" if not pending else "process"
        elapsed = time.monotonic() - started
        self.history.append(BatchResult(batch_id, barrier, action, dict(written), tuple(reused), elapsed))
        logger.info(
            "streaming job %s: micro-batch %d committed barrier %d → %s", self.job_id, batch_id, barrier, written
        )
        _failpoints.hit("before_spark_commit_log")

    def _repeats_previous(self, batch_id: int, barrier: int) -> bool:
        """Whether micro-batch `batch_id - 1` had the same barrier (a no-data micro-batch: nothing to commit)."""
        if batch_id == 0:
            return False
        try:
            before = [o for o in journaled_offsets(self.checkpoint, batch_id - 1) if o.job_id == self.job_id]
        except FileNotFoundError:
            return False
        return bool(before) and before[0].barrier == barrier

    def _transformed(
        self, transform: Transform, offset: BarrierOffset, modes: Mapping[str, WriteMode]
    ) -> Mapping[str, DataFrame]:
        """The stateless transform's frames for the micro-batch's barrier, read by Spark's parquet reader."""
        snapshots = {name: InputSnapshot(r.snapshot, r.previous) for name, r in offset.inputs.items()}
        inputs = Inputs(self.spark, self.catalog, snapshots, barrier=offset.barrier, job_id=self.job_id)
        try:
            frames = self._batch._checked_result(transform(inputs), offset.barrier)
        except PermanentFailure as exc:
            raise _GiveUp(exc) from exc
        self._batch._check_overwrites(inputs, modes)
        return frames

    def _frames(self, df: DataFrame, split: Split | None, barrier: int) -> Mapping[str, DataFrame]:
        if split is None:
            return {self.sinks[0]: df}
        from pyspark.sql import DataFrame as SparkFrame

        result = split(df)
        where = f"streaming job {self.job_id!r}, barrier {barrier}: split"
        if not isinstance(result, Mapping) or set(result) != set(self.sinks):
            got = sorted(result) if isinstance(result, Mapping) else type(result).__name__
            raise InvalidTransformResult(f"{where} returned {got}; it must return one DataFrame per sink {self.sinks}")
        for sink, frame in result.items():
            if not isinstance(frame, SparkFrame):
                raise InvalidTransformResult(f"{where} returned a {type(frame).__name__} for {sink!r}, not a DataFrame")
        return result

    def _prepare_sink(self, offset: BarrierOffset, sink: str) -> int | None:
        """Make `sink` agree with its baseline (design rule 11); the snapshot to reuse, or None to write."""
        if sink not in offset.sinks:
            return self.catalog.committed_snapshot(sink, app_id=self.job_id, barrier=offset.barrier)
        baseline = offset.sinks[sink]
        plan = plan_sink(
            self.catalog.commits_after(sink, baseline),
            table=sink,
            baseline=baseline,
            job_id=self.job_id,
            barrier=offset.barrier,
        )
        if plan.undo:
            self.catalog.restore(sink, baseline, metadata=self._undo_tags(offset.barrier))
            logger.warning("streaming job %s: undid %s of aborted attempts in %s", self.job_id, plan.undo, sink)
        return plan.reuse

    def _give_up(self, offset: BarrierOffset, written: Mapping[str, int], *, reason: str) -> bool:
        """Abort the barrier on the server, then undo what was written for it (a crash in between is repaired
        by the next barrier's `_prepare_sink`). False when it was aborted already: a replay of this micro-batch,
        or the server's abort (a lineage change)."""
        try:
            self.client.abort_barrier(
                self.job_id, offset.barrier, reason=reason, openlineage_parent=self.openlineage_parent
            )
            aborted_now = True
        except NotInFlight:
            aborted_now = False
        undone = self._undo(offset, written)
        logger.warning(
            "streaming job %s: gave barrier %d up (%s); restored %s", self.job_id, offset.barrier, reason, undone
        )
        return aborted_now

    def _undo(self, offset: BarrierOffset, written: Mapping[str, int]) -> list[str]:
        restored = []
        for sink in written:
            if sink in offset.sinks:
                self.catalog.restore(sink, offset.sinks[sink], metadata=self._undo_tags(offset.barrier))
                restored.append(sink)
        return restored

    def _undo_tags(self, barrier: int) -> dict[str, str]:
        return {"metaservice.job_id": self.job_id, UNDO_KEY: str(barrier)}


def _parallelism(spark: SparkSession) -> int:
    """The cores the session runs tasks on (its default parallelism), or 2 when it does not say (Spark Connect
    has no SparkContext)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except (NotImplementedError, AttributeError):  # Spark Connect: no SparkContext; the conf may name it
        value = spark.conf.get("spark.default.parallelism", None)
        return max(1, int(value)) if value and str(value).isdigit() else _source.PARALLELISM
