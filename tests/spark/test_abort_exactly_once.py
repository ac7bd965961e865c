"""Issue 12, case 8 / design rule 11: no row lands twice (or stays behind) across an abort.

A job with two sinks whose second sink write fails after the first sink's Delta commit: the barrier is
aborted, and the first sink must not keep that attempt's rows. Real Spark, real Delta tables, the real server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_client import DeltaCatalog, EtlJob, Inputs, MetaServiceClient, SchemaMismatch, UnexpectedSinkCommit
from spark_client.modes import Append, Merge, OverwritePartitions, WriteMode

pytestmark = pytest.mark.spark
RAW, FIRST, SECOND = "lake.raw.readings", "lake.mart.first", "lake.mart.second"


def readings(spark: SparkSession, *ids: int) -> DataFrame:
    return spark.createDataFrame([(i, f"s{i % 3}") for i in ids], "id long, sensor string")


def ids(spark: SparkSession, lake: DeltaCatalog, table: str) -> list[int]:
    version = lake.latest_snapshot(table)
    assert version is not None
    return sorted(r["id"] for r in lake.read_at(spark, table, version).collect())


def appended(inputs: Inputs) -> DataFrame:
    return inputs.changes(RAW)


def touched_partitions(inputs: Inputs) -> DataFrame:
    """The usual partition-overwrite job: recompute, from the whole input, the partitions the changes touch."""
    touched = inputs.changes(RAW).select("sensor").distinct()
    return inputs[RAW].join(touched, "sensor").select("id", "sensor")


MODES: dict[str, tuple[WriteMode, Callable[[Inputs], DataFrame]]] = {
    "append": (Append(), appended),
    "merge": (Merge(keys=("id",)), appended),
    "overwrite_partitions": (OverwritePartitions(columns=("sensor",)), touched_partitions),
}


class Pipeline:
    """One job writing FIRST (the mode under test) and SECOND (append); SECOND's write fails while `broken`."""

    def __init__(self, spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, name: str) -> None:
        self.mode, self.first = MODES[name]
        self.broken = False
        self.job = EtlJob(spark, client, lake, job_id="split", sources=[RAW], sinks=[FIRST, SECOND], future_roots=[RAW])
        self.job.register()

    def transform(self, inputs: Inputs) -> Mapping[str, DataFrame]:
        second = inputs.changes(RAW)
        if self.broken:  # a bad batch: the second sink's write raises SchemaMismatch after FIRST committed
            second = second.withColumn("id", F.col("id").cast("string"))
        return {FIRST: self.first(inputs), SECOND: second}

    def run(self, **options: Any) -> Any:
        return self.job.run_once(self.transform, mode={FIRST: self.mode, SECOND: Append()}, **options)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_abort_after_first_sink_commit_never_lands_rows_twice(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, mode: str
) -> None:
    pipeline = Pipeline(spark, client, lake, mode)
    lake.append(spark, readings(spark, 1, 2), RAW)
    assert pipeline.run().action == "process"
    good = lake.latest_snapshot(RAW)
    assert good is not None
    first_before = lake.latest_snapshot(FIRST)
    assert first_before is not None

    lake.append(spark, readings(spark, 3), RAW)  # the bad batch
    pipeline.broken = True
    with pytest.raises(SchemaMismatch):
        pipeline.run(abort_on=(SchemaMismatch,))
    runs = client._call("GET", "/jobs/split/barriers")["runs"]
    assert runs[0]["status"] == "aborted" and "SchemaMismatch" in runs[0]["reason"]
    # FIRST had committed the attempt; the abort restored it right away
    assert ids(spark, lake, FIRST) == [1, 2]
    assert lake.latest_snapshot(FIRST) == first_before + 2  # the attempt, then its undo

    lake.restore(RAW, good)  # upstream removes the bad batch and delivers a good one
    lake.append(spark, readings(spark, 4), RAW)
    pipeline.broken = False
    result = pipeline.run()
    assert result.action == "process" and result.undone == ()
    assert ids(spark, lake, FIRST) == [1, 2, 4]  # before rule 11: [1, 2, 3, 4] (append: 3 from the abort)
    assert ids(spark, lake, SECOND) == [1, 2, 4]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_crash_between_the_first_sink_commit_and_the_abort_is_undone_before_the_next_write(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, mode: str
) -> None:
    pipeline = Pipeline(spark, client, lake, mode)
    lake.append(spark, readings(spark, 1, 2), RAW)
    pipeline.run()
    good = lake.latest_snapshot(RAW)
    assert good is not None
    lake.append(spark, readings(spark, 3), RAW)
    decision = client.next_barrier("split", {RAW: good + 1})
    assert decision.action == "process" and decision.barrier is not None
    # what a driver killed right after FIRST's Delta commit leaves behind: the tagged commit, nothing else
    attempt = pipeline.first(Inputs(spark, lake, decision.inputs, barrier=decision.barrier))
    lake.write(spark, attempt, FIRST, mode=pipeline.mode, app_id="split", barrier=decision.barrier)
    client.abort_barrier("split", decision.barrier, reason="operator gave the crashed barrier up")

    lake.restore(RAW, good)
    lake.append(spark, readings(spark, 4), RAW)
    result = pipeline.run()
    assert result.action == "process" and result.undone == (FIRST,)
    assert ids(spark, lake, FIRST) == [1, 2, 4]
    assert ids(spark, lake, SECOND) == [1, 2, 4]
    restores = [c for c in lake.commits_after(FIRST, 0) if c.kind == "restore"]
    assert [(c.job_id, c.restored_snapshot_id) for c in restores] == [("split", 0)]


def test_a_commit_by_another_writer_after_the_baseline_is_a_clear_error(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    pipeline = Pipeline(spark, client, lake, "append")
    lake.append(spark, readings(spark, 1), RAW)
    pipeline.run()
    stray = lake.append(spark, readings(spark, 99), FIRST)  # someone writes the job's sink by hand
    lake.append(spark, readings(spark, 2), RAW)
    with pytest.raises(UnexpectedSinkCommit) as refused:
        pipeline.run()
    message = str(refused.value)
    assert f"sink {FIRST!r} holds snapshot {stray}" in message and "by an unknown writer" in message
    assert f"Restore {FIRST!r} to {stray - 1}" in message and "nothing was written" in message
    assert refused.value.baseline == stray - 1 and lake.latest_snapshot(FIRST) == stray
    assert lake.latest_snapshot(SECOND) == 0


def test_a_barrier_aborted_by_the_server_meanwhile_is_undone_and_reported(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    """Unregistering a job aborts its barrier in flight (rule 7; so will any lineage change of the job)."""
    pipeline = Pipeline(spark, client, lake, "append")
    lake.append(spark, readings(spark, 1), RAW)
    pipeline.run()
    lake.append(spark, readings(spark, 2), RAW)

    def lineage_changes_meanwhile(inputs: Inputs) -> Mapping[str, DataFrame]:
        frames = pipeline.transform(inputs)
        client.unregister("split")
        pipeline.job.register()
        return frames

    result = pipeline.job.run_once(lineage_changes_meanwhile, mode="append")
    assert result.action == "aborted" and result.reason
    # the job checks that its barrier is still in flight before each sink write: it wrote nothing to undo
    assert list(result.undone) == []
    assert ids(spark, lake, FIRST) == ids(spark, lake, SECOND) == [1]
    lake.append(spark, readings(spark, 3), RAW)
    results = pipeline.job.run_pending(pipeline.transform, mode="append")
    assert [r.action for r in results][-1] == "idle", results
    assert ids(spark, lake, FIRST) == ids(spark, lake, SECOND) == [1, 2, 3]  # the aborted rows once, later


def test_a_new_source_registered_while_in_flight_aborts_the_barrier_and_the_next_run_proceeds(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    """Rule 7 of the lineage rewrite: any lineage change of a job aborts its barrier in flight."""
    pipeline = Pipeline(spark, client, lake, "append")
    lake.append(spark, readings(spark, 1), RAW)
    pipeline.run()
    lake.append(spark, readings(spark, 2), RAW)
    extra = "lake.raw.calibration"
    lake.append(spark, spark.createDataFrame([(1, 0.5)], "sensor long, offset double"), extra)

    def source_added_meanwhile(inputs: Inputs) -> Mapping[str, DataFrame]:
        frames = pipeline.transform(inputs)
        client.register_source("split", extra)
        return frames

    result = pipeline.job.run_once(source_added_meanwhile, mode="append")
    assert result.action == "aborted" and list(result.undone) == []  # seen before the first sink was written
    assert ids(spark, lake, FIRST) == [1]
    pipeline.job = EtlJob(spark, client, lake, job_id="split", sources=[RAW, extra], sinks=[FIRST, SECOND])
    results = pipeline.job.run_pending(pipeline.transform, mode="append")
    assert results[-1].action == "idle" and ids(spark, lake, FIRST) == ids(spark, lake, SECOND) == [1, 2]
