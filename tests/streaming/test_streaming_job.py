"""A streaming job is a real Structured Streaming query: one barrier per micro-batch, read through the
`metaservice` Python data source, written and committed through the catalogs, in every format."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_client import MetaServiceClient, apply_rollback
from spark_client.catalog import Catalog, DeltaCatalog
from spark_client.modes import Append, Merge, Overwrite
from spark_client.streaming import CheckpointAfterRollback, StreamingJob, UnsupportedTrigger, check_trigger
from spark_client.streaming._offsets import journaled_offsets
from spark_client.streaming.progress import figures_of

RAW, OUT = "lake.raw.events", "lake.mart.events"
SCHEMA = "id long, k long, v long"


def batch(spark: SparkSession, first: int, count: int) -> DataFrame:
    return spark.createDataFrame([(i, i % 3, 10 * i) for i in range(first, first + count)], SCHEMA)


def rows(spark: SparkSession, catalog: Catalog, table: str, snapshot: int) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in catalog.read_at(spark, table, snapshot).collect())


def make_job(spark: SparkSession, client: MetaServiceClient, catalog: Catalog, tmp_path: Path) -> StreamingJob:
    job = StreamingJob(
        spark,
        client,
        catalog,
        job_id="stream",
        sources=[RAW],
        sinks=[OUT],
        checkpoint=tmp_path / "checkpoint",
        start="earliest",
        future_roots=[RAW],
    )
    job.register()
    return job


def test_available_now_processes_one_barrier_per_micro_batch_and_restarts_from_the_checkpoint(
    spark: SparkSession, client: MetaServiceClient, catalog: Catalog, tmp_path: Path
) -> None:
    job = make_job(spark, client, catalog, tmp_path)
    barriers = []
    for round_ in range(3):
        catalog.append(spark, batch(spark, 100 * round_, 5), RAW)
        query = job.start(job.read(RAW), mode=Append(), trigger={"availableNow": True})
        query.awaitTermination(120)
        assert query.exception() is None
        processed = [r for r in job.history if r.action == "process"]
        assert len(processed) == round_ + 1, job.history  # exactly one new barrier per round
        barrier = processed[-1].barrier
        barriers.append(barrier)
        # the micro-batch's offset carries the barrier and the input's range
        offset = journaled_offsets(job.checkpoint, processed[-1].batch_id)[0]
        assert offset.barrier == barrier
        assert offset.inputs[RAW].snapshot == catalog.latest_snapshot(RAW)
        # the sink at the barrier holds exactly the root's rows at the barrier
        versions = client.versions([RAW, OUT], "strong")
        assert versions.barrier == barrier
        assert rows(spark, catalog, OUT, versions.versions[OUT]) == rows(spark, catalog, RAW, versions.versions[RAW])
    assert barriers == sorted(set(barriers))


def test_processing_time_query_follows_new_root_data(
    spark: SparkSession, client: MetaServiceClient, catalog: Catalog, tmp_path: Path
) -> None:
    job = make_job(spark, client, catalog, tmp_path)
    catalog.append(spark, batch(spark, 0, 4), RAW)
    counts = job.read(RAW).groupBy("k").count()
    query = job.start(
        counts, mode=Merge(keys=("k",)), output_mode="update", trigger={"processingTime": "200 milliseconds"}
    )
    try:
        query.processAllAvailable()
        catalog.append(spark, batch(spark, 10, 6), RAW)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    versions = client.versions([RAW, OUT], "strong")
    raw = catalog.read_at(spark, RAW, versions.versions[RAW])
    expected = sorted((r["k"], r["count"]) for r in raw.groupBy("k").count().collect())
    assert rows(spark, catalog, OUT, versions.versions[OUT]) == expected
    assert len([r for r in job.history if r.action == "process"]) == 2


def test_unsupported_triggers_and_modes_are_refused_naming_the_supported_ones(
    spark: SparkSession, client: MetaServiceClient, lake: Catalog, tmp_path: Path
) -> None:
    for trigger in ({"once": True}, {"continuous": "1 second"}, {"availableNow": False}, {}):
        with pytest.raises(UnsupportedTrigger, match=r"processingTime.*availableNow"):
            check_trigger(trigger)
    assert check_trigger(None) == {"processingTime": "1 second"}
    job = make_job(spark, client, lake, tmp_path)
    lake.append(spark, batch(spark, 0, 2), RAW)
    with pytest.raises(UnsupportedTrigger):
        job.start(job.read(RAW), trigger={"once": True})
    with pytest.raises(ValueError, match="Overwrite"):
        job.start(job.read(RAW), mode=Overwrite())
    assert not spark.streams.active


def test_progress_figures_and_a_rollback_refuses_the_old_checkpoint(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, api: httpx.Client, tmp_path: Path
) -> None:
    job = make_job(spark, client, lake, tmp_path)
    barriers = []
    for round_ in range(2):
        lake.append(spark, batch(spark, 100 * round_, 3), RAW)
        query = job.start(job.read(RAW), mode=Append(), trigger={"availableNow": True})
        query.awaitTermination(120)
        figures = figures_of(query.lastProgress)
        assert figures is not None and figures.barrier == job.history[-1].barrier
        assert figures.query == "stream" and figures.duration_seconds > 0 and figures.lag_seconds >= 0
        barriers.append(figures.barrier)
    # to the server it is a job like any other: its sink's delay names it
    delays = api.get("/delays")
    assert delays.status_code == 200 and "stream" in delays.text and OUT in delays.text

    plan = client.plan_rollback(RAW, barriers[0])
    assert OUT in plan.tables
    apply_rollback(client, lake, plan)
    with pytest.raises(CheckpointAfterRollback, match="new checkpoint"):
        job.start(job.read(RAW), mode=Append(), trigger={"availableNow": True})
    assert not spark.streams.active

    fresh = StreamingJob(
        spark, client, lake, job_id="stream", sources=[RAW], sinks=[OUT], checkpoint=tmp_path / "full-refresh"
    )
    lake.append(spark, batch(spark, 500, 2), RAW)
    query = fresh.start(fresh.read(RAW), mode=Append(), trigger={"availableNow": True})
    query.awaitTermination(120)
    assert query.exception() is None and fresh.history
    versions = client.versions([RAW, OUT], "strong")
    assert versions.barrier == fresh.history[-1].barrier
    assert rows(spark, lake, OUT, versions.versions[OUT]) == rows(spark, lake, RAW, versions.versions[RAW])


def test_a_stream_reads_only_the_columns_asked_for(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, tmp_path: Path
) -> None:
    job = make_job(spark, client, lake, tmp_path)
    lake.append(spark, batch(spark, 0, 4), RAW)
    with pytest.raises(KeyError, match=r"\['w'\].*id, k, v"):
        job.read(RAW, columns=["id", "w"])
    narrow = job.read(RAW, columns=["v", "id"])
    assert narrow.columns == ["v", "id"]  # the Python readers hand Spark only these (no pruning otherwise)
    query = job.start(narrow, mode=Append(), trigger={"availableNow": True})
    query.awaitTermination(120)
    assert query.exception() is None
    versions = client.versions([RAW, OUT], "strong")
    expected = sorted((r["v"], r["id"]) for r in lake.read_at(spark, RAW, versions.versions[RAW]).collect())
    assert rows(spark, lake, OUT, versions.versions[OUT]) == expected


def test_available_now_with_on_rewrite_abort_gives_the_barrier_up_and_stops(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, tmp_path: Path
) -> None:
    """availableNow processes the barriers of the data present at its start, then stops. A barrier given up for a
    rewritten input (`on_rewrite="abort"`) is offered again by the server (its rows are owed), and would be given
    up again each micro-batch for as long as the rewrite stands: the run stops after giving it up once, and the
    next run tries again."""
    job = make_job(spark, client, lake, tmp_path)
    lake.append(spark, batch(spark, 0, 3), RAW)
    first = job.start(job.read(RAW), mode=Append(), trigger={"availableNow": True})
    assert first.awaitTermination(120) and first.exception() is None
    kept = lake.latest_snapshot(OUT)
    assert kept is not None
    lake.write(spark, batch(spark, 1, 3), RAW, mode="overwrite")

    for attempt in (1, 2):
        query = job.start(job.read(RAW, on_rewrite="abort"), mode=Append(), trigger={"availableNow": True})
        assert query.awaitTermination(120), "availableNow kept giving the re-offered barrier up"
        assert query.exception() is None
        runs = client.get_job("stream")
        assert runs["in_flight_barrier"] is None
        # what was written for the barrier given up is undone (a restore: a new version with the old rows)
        latest = lake.latest_snapshot(OUT)
        assert latest is not None and rows(spark, lake, OUT, latest) == rows(spark, lake, OUT, kept), attempt
    statuses = [r["status"] for r in httpx.get(f"{client.base_url}/jobs/stream/barriers").json()["runs"]]
    assert statuses.count("aborted") == 2 and statuses.count("committed") == 1, statuses
