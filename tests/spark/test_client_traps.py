"""Traps a new user fell into with EtlJob, each now followed or answered clearly: a job object follows lineage
changes of its sources, a Merge of duplicate keys is a permanent failure naming the job, the table and the keys,
a schema mismatch says which `schema=` to write with, and a barrier the server aborted is not written (checked
before each sink). Real Spark, real Delta tables, the real server over HTTP."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_client import DeltaCatalog, EtlJob, Inputs, MetaServiceClient, SchemaMismatch
from spark_client.errors import DuplicateMergeKeys
from spark_client.modes import Append, Merge, WriteMode

RAW, MID, OUT = "lake.raw.events", "lake.stage.events", "lake.mart.events"
STATE, LOG = "lake.mart.state", "lake.mart.log"


def rows(spark: SparkSession, *ids: int, value: str = "v") -> DataFrame:
    return spark.createDataFrame([(i, f"{value}{i}") for i in ids], "id long, value string")


def ids(spark: SparkSession, lake: DeltaCatalog, table: str) -> list[int]:
    version = lake.latest_snapshot(table)
    assert version is not None, f"{table} holds nothing"
    return sorted(r["id"] for r in lake.read_at(spark, table, version).collect())


def copy(source: str, sink: str) -> Any:
    def transform(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {sink: inputs.changes(source)}

    return transform


def test_a_job_object_follows_its_sources_lineage_changes(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    """The upstream job is retired (its table becomes a root that is ingested into), then comes back (the table is
    written by a job again): the same downstream job object reports the table as a root exactly while it is one.
    It used to keep the first list of roots: new rows of the orphaned table were never sealed, and after the
    upstream came back every run failed with NotRoot until the process restarted."""
    upstream = EtlJob(spark, client, lake, job_id="stage", sources=[RAW], sinks=[MID], future_roots=[RAW])
    downstream = EtlJob(spark, client, lake, job_id="publish", sources=[MID], sinks=[OUT])
    upstream.register()
    downstream.register()
    lake.append(spark, rows(spark, 1, 2), RAW)
    assert upstream.run_once(copy(RAW, MID), mode="append").action == "process"
    assert downstream.run_once(copy(MID, OUT), mode="append").action == "process"
    assert ids(spark, lake, OUT) == [1, 2]

    upstream.unregister()  # retired: MID has no writer, rows are ingested into it directly
    assert client.get_table(MID)["kind"] == "root"
    lake.append(spark, rows(spark, 3), MID)
    orphaned = downstream.run_once(copy(MID, OUT), mode="append")
    assert orphaned.action == "process", orphaned  # MID's new snapshot was reported as a root and sealed
    assert ids(spark, lake, OUT) == [1, 2, 3]

    upstream.register()  # back: MID is written by a job again
    assert client.get_table(MID)["kind"] != "root"
    after_revival = downstream.run_once(copy(MID, OUT), mode="append")  # used to raise NotRoot, run after run
    assert after_revival.action in ("idle", "wait"), after_revival
    lake.append(spark, rows(spark, 4), RAW)
    assert upstream.run_once(copy(RAW, MID), mode="append").action == "process"
    processed = downstream.run_pending(copy(MID, OUT), mode="append")
    assert processed[0].action == "process", processed
    assert ids(spark, lake, OUT) == ids(spark, lake, MID) == [1, 2, 3, 4]


def test_a_merge_of_duplicate_keys_is_a_permanent_failure_naming_job_table_and_keys(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    job = EtlJob(spark, client, lake, job_id="state", sources=[RAW], sinks=[STATE, LOG], future_roots=[RAW])
    job.register()
    lake.append(spark, rows(spark, 1, 2), RAW)
    modes: dict[str, WriteMode] = {STATE: Merge(keys=("id",)), LOG: Append()}
    job.run_once(lambda i: {STATE: i.changes(RAW), LOG: i.changes(RAW)}, mode=modes)
    before = {t: lake.latest_snapshot(t) for t in (STATE, LOG)}
    lake.append(spark, rows(spark, 3, 3, 3, 4, 4, 5), RAW)  # an export that repeats rows

    def naive(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {LOG: inputs.changes(RAW), STATE: inputs.changes(RAW)}

    with pytest.raises(DuplicateMergeKeys) as refused:
        job.run_once(naive, mode=modes)
    error = refused.value
    assert (error.job_id, error.table, error.keys) == ("state", STATE, ("id",))
    assert sorted((s["id"], s["rows"]) for s in error.sample) == [(3, 3), (4, 2)]
    message = str(error)
    assert "job 'state'" in message and f"sink {STATE!r}" in message and "id=3 (3 rows)" in message
    assert "dropDuplicates" in message and "Append" in message and "aborted" in message
    history = client._object("GET", "/jobs/state/barriers")["runs"]
    assert history[0]["barrier"] == error.barrier and history[0]["status"] == "aborted"
    assert "DuplicateMergeKeys" in history[0]["reason"]
    assert {t: lake.latest_snapshot(t) for t in (STATE, LOG)} == before  # the Append before it was undone
    assert client.get_job("state")["in_flight_barrier"] is None  # not retried as is, run after run

    def deduplicated(inputs: Inputs) -> Mapping[str, DataFrame]:
        new = inputs.changes(RAW)
        return {LOG: new, STATE: new.dropDuplicates(["id"])}

    assert job.run_once(deduplicated, mode=modes).action == "process"
    assert ids(spark, lake, STATE) == [1, 2, 3, 4, 5]  # the aborted barrier's input was read again
    assert ids(spark, lake, LOG) == [1, 2, 3, 3, 3, 4, 4, 5]


def test_a_schema_mismatch_says_which_schema_policy_to_write_with(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    job = EtlJob(spark, client, lake, job_id="widen", sources=[RAW], sinks=[OUT], future_roots=[RAW])
    job.register()
    lake.append(spark, rows(spark, 1), RAW)
    job.run_once(copy(RAW, OUT), mode="append")
    lake.append(spark, rows(spark, 2), RAW)

    def with_a_new_column(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {OUT: inputs.changes(RAW).selectExpr("*", "'web' AS channel")}

    with pytest.raises(SchemaMismatch) as refused:
        job.run_once(with_a_new_column, mode="append")
    message = str(refused.value)
    assert "channel: table missing, data string" in message
    assert "write with schema='merge' (e.g. Append(schema='merge')" in message, message
    assert refused.value.hint in message
    assert job.run_once(with_a_new_column, mode=Append(schema="merge")).action == "process"


class AbortingLake(DeltaCatalog):
    """A real Delta catalog on which the server aborts the job's barrier (as an operator or a lineage change
    would) right after the first sink is written: the abort lands between two sinks."""

    def __init__(self, root: Path, client: MetaServiceClient) -> None:
        super().__init__(root)
        self.client = client
        self.written: list[str] = []

    def write(self, spark: SparkSession, df: DataFrame, table: str, **options: Any) -> int:
        snapshot = super().write(spark, df, table, **options)
        if options.get("barrier") is None:
            return snapshot  # an ingestion append, not the job's write
        self.written.append(table)
        if len(self.written) == 1:
            self.client.abort_barrier(options["app_id"], options["barrier"], reason="given up by an operator")
        return snapshot


def test_a_barrier_aborted_between_sinks_writes_no_further_sink(
    spark: SparkSession, client: MetaServiceClient, tmp_path: Path
) -> None:
    lake = AbortingLake(tmp_path / "lake", client)
    job = EtlJob(spark, client, lake, job_id="fanout", sources=[RAW], sinks=[STATE, LOG], future_roots=[RAW])
    job.register()
    lake.append(spark, rows(spark, 1, 2), RAW)
    result = job.run_once(lambda i: {STATE: i.changes(RAW), LOG: i.changes(RAW)}, mode="append")
    assert result.action == "aborted", result
    assert lake.written == [STATE]  # the second sink's work was not done
    assert lake.latest_snapshot(LOG) is None
    assert result.undone == (STATE,)
    assert result.reason is not None and f"before sink {LOG!r}" in result.reason
    assert "given up by an operator" in result.reason
    assert ids(spark, lake, STATE) == []  # what was written for the barrier is undone


def test_a_barrier_aborted_while_the_transform_ran_writes_nothing(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    job = EtlJob(spark, client, lake, job_id="slow", sources=[RAW], sinks=[OUT], future_roots=[RAW])
    job.register()
    lake.append(spark, rows(spark, 1), RAW)

    def aborted_meanwhile(inputs: Inputs) -> Mapping[str, DataFrame]:
        client.abort_barrier("slow", inputs.barrier, reason="lineage changed")
        return {OUT: inputs.changes(RAW)}

    result = job.run_once(aborted_meanwhile, mode="append")
    assert result.action == "aborted" and result.undone == ()
    assert result.reason is not None and "lineage changed" in result.reason
    assert lake.latest_snapshot(OUT) is None  # nothing was written for a barrier the server gave up
    assert job.run_once(copy(RAW, OUT), mode="append").action == "process"
    assert ids(spark, lake, OUT) == [1]
