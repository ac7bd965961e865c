"""A stateless streaming job (`StreamingJob.start_stateless`): a batch job's transform run once per micro-batch
on the barrier's inputs, read by Spark's own parquet reader, while the `metaservice` stream only plans. The same
offsets, checkpoint, triggers and exactly-once replay as a query whose rows flow through the stream; the crash
matrix (test_crash_matrix.py) kills it at every point of a micro-batch as well."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark_client import Inputs, MetaServiceClient, PermanentFailure
from spark_client.catalog import Catalog, DeltaCatalog
from spark_client.modes import Append, Merge, Overwrite
from spark_client.streaming import StreamingJob
from spark_client.streaming._offsets import journaled_offsets

RAW, DIM, OUT, TOTALS = "lake.raw.events", "lake.raw.kinds", "lake.mart.events", "lake.mart.totals"
SCHEMA = "id long, k long, v long"


def batch(spark: SparkSession, first: int, count: int) -> DataFrame:
    return spark.createDataFrame([(i, i % 3, 10 * i) for i in range(first, first + count)], SCHEMA)


def rows(spark: SparkSession, catalog: Catalog, table: str, snapshot: int) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in catalog.read_at(spark, table, snapshot).collect())


def compute(df: DataFrame) -> DataFrame:
    return df.where(F.col("v") % 20 == 0).withColumn("w", F.col("v") * 2 + F.col("k"))


def make_job(
    spark: SparkSession,
    client: MetaServiceClient,
    catalog: Catalog,
    tmp_path: Path,
    *,
    sources: tuple[str, ...] = (RAW,),
    sinks: tuple[str, ...] = (OUT,),
) -> StreamingJob:
    job = StreamingJob(
        spark,
        client,
        catalog,
        job_id="stateless",
        sources=list(sources),
        sinks=list(sinks),
        checkpoint=tmp_path / "checkpoint",
        start="earliest",
        future_roots=list(sources),
    )
    job.register()
    return job


def run(job: StreamingJob, transform: Any, **kwargs: Any) -> StreamingQuery:
    """Start the stateless query with availableNow and wait until it stops (`query.exception()`: how it failed)."""
    query = job.start_stateless(transform, trigger={"availableNow": True}, **kwargs)
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(180)
    assert not query.isActive
    return query


def test_each_barrier_is_read_by_sparks_parquet_reader_and_restarts_from_the_checkpoint(
    spark: SparkSession, client: MetaServiceClient, catalog: Catalog, tmp_path: Path
) -> None:
    job = make_job(spark, client, catalog, tmp_path)

    def transform(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {OUT: compute(inputs.changes(RAW))}

    for round_ in range(3):  # every round a new query on the same checkpoint
        catalog.append(spark, batch(spark, 100 * round_, 6), RAW)
        query = run(job, transform, mode=Append())
        assert query.exception() is None
        processed = [r for r in job.history if r.action == "process"]
        assert len(processed) == round_ + 1, job.history  # one micro-batch per barrier
        (offset,) = journaled_offsets(job.checkpoint, processed[-1].batch_id)
        assert offset.barrier == processed[-1].barrier and offset.inputs[RAW].snapshot == catalog.latest_snapshot(RAW)
        progress = [p for p in query.recentProgress if p["batchId"] == processed[-1].batch_id]
        assert progress and progress[0]["numInputRows"] == 0  # no row came through the source's Python readers
        versions = client.versions([RAW, OUT], "strong")
        assert versions.barrier == processed[-1].barrier
        expected = sorted(tuple(r) for r in compute(catalog.read_at(spark, RAW, versions.versions[RAW])).collect())
        assert rows(spark, catalog, OUT, versions.versions[OUT]) == expected


def test_several_inputs_and_sinks_one_stream_and_the_whole_of_an_input(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, tmp_path: Path
) -> None:
    kinds = spark.createDataFrame([(0, "zero"), (1, "one"), (2, "two")], "k long, name string")
    lake.append(spark, kinds, DIM)
    job = make_job(spark, client, lake, tmp_path, sources=(RAW, DIM), sinks=(OUT, TOTALS))

    def transform(inputs: Inputs) -> Mapping[str, DataFrame]:
        new = inputs.changes(RAW).join(inputs[DIM], "k")  # a stream-static join: the dimension whole
        return {OUT: new, TOTALS: new.groupBy("name").agg(F.sum("v").alias("v"))}

    for round_ in range(2):
        lake.append(spark, batch(spark, 10 * round_, 4), RAW)
        query = run(job, transform, mode={OUT: Append(), TOTALS: Merge(keys=("name",))})
        assert query.exception() is None
    versions = client.versions([RAW, DIM, OUT, TOTALS], "strong")
    assert versions.barrier == job.history[-1].barrier and [r.action for r in job.history] == ["process"] * 2
    joined = lake.read_at(spark, RAW, versions.versions[RAW]).join(
        lake.read_at(spark, DIM, versions.versions[DIM]), "k"
    )
    assert rows(spark, lake, OUT, versions.versions[OUT]) == sorted(tuple(r) for r in joined.collect())
    # Merge upserts each barrier's sums: what the last barrier brought per name
    last = batch(spark, 10, 4).join(kinds, "k").groupBy("name").agg(F.sum("v").alias("v"))
    assert rows(spark, lake, TOTALS, versions.versions[TOTALS]) == sorted(tuple(r) for r in last.collect())


def test_a_rewritten_input_fails_the_query_then_on_rewrite_full_processes_the_same_barrier(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, tmp_path: Path
) -> None:
    job = make_job(spark, client, lake, tmp_path)
    lake.append(spark, batch(spark, 0, 3), RAW)
    assert run(job, lambda inputs: {OUT: inputs.changes(RAW)}, mode=Append()).exception() is None
    lake.write(spark, batch(spark, 1, 3), RAW, mode="overwrite")

    failed = run(job, lambda inputs: {OUT: inputs.changes(RAW)}, mode=Append())
    assert failed.exception() is not None and "NotAppendOnly" in str(failed.exception())
    in_flight = client.get_job("stateless")["in_flight_barrier"]
    assert in_flight is not None and lake.latest_snapshot(OUT) == job.history[0].snapshots[OUT]

    def whole(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {OUT: inputs.changes(RAW, on_rewrite="full")}

    assert run(job, whole, mode=Merge(keys=("id",))).exception() is None  # the journaled micro-batch again
    assert job.history[-1].barrier == in_flight and job.history[-1].action == "process"
    versions = client.versions([RAW, OUT], "strong")
    assert [r[0] for r in rows(spark, lake, OUT, versions.versions[OUT])] == [0, 1, 2, 3]


def test_a_permanent_failure_aborts_the_barrier_stops_the_query_and_the_restart_moves_on(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, tmp_path: Path
) -> None:
    job = make_job(spark, client, lake, tmp_path)
    lake.append(spark, batch(spark, 0, 3), RAW)
    assert run(job, lambda inputs: {OUT: inputs.changes(RAW)}, mode=Append()).exception() is None
    kept = lake.latest_snapshot(OUT)
    lake.append(spark, batch(spark, 10, 3), RAW)

    def refuse(_inputs: Inputs) -> Mapping[str, DataFrame]:
        raise PermanentFailure("the upstream export is empty")

    failed = run(job, refuse, mode=Append())
    assert failed.exception() is not None and "the upstream export is empty" in str(failed.exception())
    aborted = job.history[-1]
    assert aborted.action == "aborted" and lake.latest_snapshot(OUT) == kept
    runs = client._call("GET", "/jobs/stateless/barriers")["runs"]
    assert runs[0]["barrier"] == aborted.barrier and runs[0]["status"] == "aborted"
    assert "the upstream export is empty" in runs[0]["reason"]
    assert client.get_job("stateless")["in_flight_barrier"] is None

    # the restart replays the journaled micro-batch (its barrier aborted: written, then undone) and goes on to
    # the barrier the server offers for what the aborted one held, counting changes from the last committed one
    assert run(job, lambda inputs: {OUT: inputs.changes(RAW)}, mode=Append()).exception() is None
    assert [r.action for r in job.history[-2:]] == ["aborted", "process"]
    assert job.history[-2].barrier == aborted.barrier < job.history[-1].barrier
    versions = client.versions([RAW, OUT], "strong")
    assert versions.barrier == job.history[-1].barrier
    assert rows(spark, lake, OUT, versions.versions[OUT]) == rows(spark, lake, RAW, versions.versions[RAW])


def test_overwrite_is_refused_for_changes_and_replaces_the_sink_with_a_whole_input(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, tmp_path: Path
) -> None:
    job = make_job(spark, client, lake, tmp_path)
    lake.append(spark, batch(spark, 0, 3), RAW)
    refused = run(job, lambda inputs: {OUT: inputs.changes(RAW)}, mode=Overwrite())
    assert refused.exception() is not None and "UnsafeWriteMode" in str(refused.exception())
    assert lake.latest_snapshot(OUT) is None

    for round_ in range(2):
        if round_:
            lake.append(spark, batch(spark, 10, 2), RAW)
        assert run(job, lambda inputs: {OUT: inputs[RAW].groupBy("k").count()}, mode=Overwrite()).exception() is None
    versions = client.versions([RAW, OUT], "strong")
    counts = lake.read_at(spark, RAW, versions.versions[RAW]).groupBy("k").count()
    assert rows(spark, lake, OUT, versions.versions[OUT]) == sorted(tuple(r) for r in counts.collect())
