"""Mistakes a new user makes with EtlJob, each answered by a clear error (or a documented policy), never by
silently lost or dropped rows. Real Spark, real Delta tables, the real server over HTTP."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_client import (
    Conflict,
    DeltaCatalog,
    EtlJob,
    Inputs,
    InvalidTransformResult,
    MetaServiceClient,
    NotAppendOnly,
    PermanentFailure,
    UnsafeWriteMode,
)
from spark_client.modes import Append, Merge

pytestmark = pytest.mark.spark
RAW, CLEAN, OTHER = "lake.raw.readings", "lake.mart.clean", "lake.mart.other"


def readings(spark: SparkSession, *ids: int) -> DataFrame:
    return spark.createDataFrame([(i, f"s{i % 3}", float(i)) for i in ids], "id long, sensor string, value double")


def make_job(spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, **options: Any) -> EtlJob:
    job = EtlJob(spark, client, lake, job_id="clean", sources=[RAW], sinks=[CLEAN], future_roots=[RAW], **options)
    job.register()
    return job


def ids(spark: SparkSession, lake: DeltaCatalog, table: str = CLEAN) -> list[int]:
    version = lake.latest_snapshot(table)
    assert version is not None
    return sorted(r["id"] for r in lake.read_at(spark, table, version).collect())


def incremental(inputs: Inputs) -> Mapping[str, DataFrame]:
    return {CLEAN: inputs.changes(RAW)}


def test_an_incremental_read_written_with_the_default_overwrite_is_refused(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    job = make_job(spark, client, lake)
    lake.append(spark, readings(spark, 1, 2), RAW)
    with pytest.raises(UnsafeWriteMode) as refused:
        job.run_once(incremental)  # default mode "overwrite"
    message = str(refused.value)
    assert "job 'clean'" in message and f"sink {CLEAN!r}" in message and RAW in message
    assert "Append" in message and "nothing was written" in message
    assert lake.latest_snapshot(CLEAN) is None
    in_flight = client.get_job("clean")["in_flight_barrier"]
    assert in_flight is not None  # left for a retry with the right mode
    first = job.run_once(incremental, mode="append")
    assert first.barrier == in_flight
    lake.append(spark, readings(spark, 3), RAW)
    job.run_once(incremental, mode=Append())
    assert ids(spark, lake) == [1, 2, 3]  # the issue's run kept only [3]


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (lambda df: {CLEAN: df, OTHER: df}, r"not sinks of the job: \['lake.mart.other'\]"),
        (lambda df: df, r"returned a bare DataFrame; return a mapping .* e\.g\. \{'lake.mart.clean': df\}"),
        (lambda _df: None, "returned None; it must return a mapping"),
        (lambda _df: {}, r"no DataFrame for sinks \['lake.mart.clean'\]"),
        (lambda df: {CLEAN: df.collect()}, f"returned a list for sink {CLEAN!r}; every value must be a Spark"),
        (lambda df: [df], "returned a list; it must return a mapping"),
    ],
    ids=["undeclared-sink", "bare-dataframe", "none", "empty", "rows-not-dataframe", "list"],
)
def test_a_transform_result_that_is_not_one_dataframe_per_sink_is_refused(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, returned: Any, expected: str
) -> None:
    job = make_job(spark, client, lake)
    lake.append(spark, readings(spark, 1), RAW)
    with pytest.raises(InvalidTransformResult, match=expected) as refused:
        job.run_once(lambda inputs: returned(inputs[RAW]), mode="append")
    assert "job 'clean', barrier " in str(refused.value)
    assert lake.latest_snapshot(CLEAN) is None and lake.latest_snapshot(OTHER) is None
    assert client.get_job("clean")["in_flight_barrier"] is not None


def overwrite_root(spark: SparkSession, lake: DeltaCatalog, *ids_: int) -> None:
    lake.write(spark, readings(spark, *ids_), RAW, mode="overwrite")


def test_a_rewritten_input_fails_with_the_choices_named_and_stays_in_flight(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    job = make_job(spark, client, lake)
    lake.append(spark, readings(spark, 1, 2), RAW)
    job.run_once(incremental, mode="append")
    overwrite_root(spark, lake, 1, 5)
    with pytest.raises(NotAppendOnly) as failed:
        job.run_once(incremental, mode="append")
    message = str(failed.value)
    assert f"inputs.changes({RAW!r}, on_rewrite='full')" in message and "on_rewrite='abort'" in message
    assert "job 'clean'" in message and failed.value.table == RAW
    assert client.get_job("clean")["in_flight_barrier"] is not None

    def whole_on_rewrite(inputs: Inputs) -> Mapping[str, DataFrame]:
        rows = inputs.changes(RAW, on_rewrite="full")
        assert inputs.rewritten == {RAW}
        return {CLEAN: rows}

    done = job.run_once(whole_on_rewrite, mode=Merge(keys=("id",)))
    assert done.action == "process"
    assert ids(spark, lake) == [1, 2, 5]  # merged on the key: 1 once, 2 kept from before, 5 new


def test_on_rewrite_abort_gives_the_barrier_up_and_the_next_run_proceeds(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    job = make_job(spark, client, lake)
    lake.append(spark, readings(spark, 1, 2), RAW)
    job.run_once(incremental, mode="append")
    before = lake.latest_snapshot(RAW)
    assert before is not None
    overwrite_root(spark, lake, 9)

    def abort_on_rewrite(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {CLEAN: inputs.changes(RAW, on_rewrite="abort")}

    with pytest.raises(PermanentFailure, match="on_rewrite='abort'"):
        job.run_once(abort_on_rewrite, mode="append")
    runs = client._call("GET", "/jobs/clean/barriers")["runs"]
    assert runs[0]["status"] == "aborted" and "rewritten" in runs[0]["reason"]
    assert client.get_job("clean")["in_flight_barrier"] is None
    lake.restore(RAW, before)  # the bad overwrite is rolled back upstream
    lake.append(spark, readings(spark, 3), RAW)
    assert job.run_once(abort_on_rewrite, mode="append").action == "process"
    assert ids(spark, lake) == [1, 2, 3]


def test_a_new_job_starts_at_the_newest_barrier_and_start_earliest_backfills(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    newest = make_job(spark, client, lake)
    backfill = EtlJob(
        spark, client, lake, job_id="backfill", sources=[RAW], sinks=[OTHER], start="earliest", future_roots=[RAW]
    )
    backfill.register()
    lake.append(spark, readings(spark, 1), RAW)
    client.issue_barrier({RAW: 0})
    lake.append(spark, readings(spark, 2), RAW)
    client.issue_barrier({RAW: 1})

    processed = [r for r in newest.run_pending(incremental, mode="append") if r.action == "process"]
    assert len(processed) == 1 and ids(spark, lake) == [1, 2]  # one barrier: the newest, holding both rows

    def copy(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {OTHER: inputs.changes(RAW)}

    filled = [r for r in backfill.run_pending(copy, mode="append") if r.action == "process"]
    assert len(filled) == 2 and ids(spark, lake, OTHER) == [1, 2]  # both barriers, one row each


def test_table_names_job_ids_and_modes_are_checked_when_given(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    with pytest.raises(ValueError, match=r"job 'clean': source 'raw.readings' is not a valid table name"):
        EtlJob(spark, client, lake, job_id="clean", sources=["raw.readings"], sinks=[CLEAN])
    with pytest.raises(ValueError, match=r"job 'clean': sink 'lake.mart.a b' is not a valid table name"):
        EtlJob(spark, client, lake, job_id="clean", sources=[RAW], sinks=["lake.mart.a b"])
    with pytest.raises(TypeError, match="sources is a list of table names, got the string"):
        EtlJob(spark, client, lake, job_id="clean", sources=RAW, sinks=[CLEAN])
    with pytest.raises(ValueError, match="job ids match"):
        EtlJob(spark, client, lake, job_id="clean job", sources=[RAW], sinks=[CLEAN])
    with pytest.raises(ValueError, match="start must be 'newest', 'earliest' or a barrier"):
        EtlJob(spark, client, lake, job_id="clean", sources=[RAW], sinks=[CLEAN], start="oldest")  # type: ignore[arg-type]
    job = make_job(spark, client, lake)
    lake.append(spark, readings(spark, 1), RAW)
    with pytest.raises(ValueError, match=r"job 'clean': no mode for sinks \['lake.mart.clean'\]"):
        job.run_once(incremental, mode={OTHER: "append"})
    assert client.get_job("clean")["in_flight_barrier"] is None  # refused before asking the server


def test_appending_to_a_root_then_run_once_processes_a_new_barrier_without_issue_barrier(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    """Documented (README "When barriers are issued"): `next` reports the root's newest snapshot and the
    server issues a barrier sealing it."""
    job = make_job(spark, client, lake)
    lake.append(spark, readings(spark, 1), RAW)
    first = job.run_once(incremental, mode="append")
    lake.append(spark, readings(spark, 2), RAW)
    second = job.run_once(incremental, mode="append")
    assert first.action == second.action == "process" and second.barrier > first.barrier  # type: ignore[operator]
    assert job.run_once(incremental, mode="append").action == "idle"


def test_a_misspelt_source_is_refused_at_register_and_registers_nothing(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    typo = "lake.raw.readngs"
    job = EtlJob(spark, client, lake, job_id="clean", sources=[typo], sinks=[CLEAN])
    with pytest.raises(Conflict, match=typo) as refused:
        job.register()
    assert refused.value.code == "unknown_source"
    assert httpx.get(f"{client.base_url}/jobs").json()["jobs"] == []  # one request, one outcome: not even the sink

    lake.append(spark, readings(spark, 1), RAW)  # a source storage holds is a root, although MetaService is new to it
    EtlJob(spark, client, lake, job_id="clean", sources=[RAW], sinks=[CLEAN]).register()
    assert httpx.get(f"{client.base_url}/jobs/clean").json()["sources"] == [RAW]
    with pytest.raises(ValueError, match="future_roots must be a list of its sources"):
        EtlJob(spark, client, lake, job_id="other", sources=[RAW], sinks=[OTHER], future_roots=[typo])
