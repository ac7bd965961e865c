"""A job started by an orchestrator names the orchestrator's OpenLineage run as its parent: `EtlJob` and
`StreamingJob` take it from `OPENLINEAGE_PARENT_ID` (what Airflow's provider and openlineage-dbt use) unless
given, check it when built, and send it with `next`, commit and abort, so the event MetaService sends for each run
the job ends nests under it. Real Spark, real Delta tables, a real server sending to a real OpenLineage receiver."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_client import DeltaCatalog, EtlJob, Inputs, MetaServiceClient
from spark_client.modes import Append
from spark_client.streaming import StreamingJob
from tests import support
from tests.support.openlineage import Capture, start_server

RAW, OUT = "lake.raw.events", "lake.mart.events"
ENV = "OPENLINEAGE_PARENT_ID"


@pytest.fixture(scope="module", name="capture")
def fx_capture() -> Iterator[Capture]:
    with Capture() as capture:
        yield capture


@pytest.fixture(scope="module", name="emitting_server")
def fx_emitting_server(
    database_url: str, capture: Capture, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[support.ServerProcess]:
    server = start_server(
        database_url,
        Path(tmp_path_factory.mktemp("ol-parent")),
        openlineage_url=capture.url,
        openlineage_namespace="ms",
    )
    yield server
    server.stop()


@pytest.fixture(name="emitting")
def fx_emitting(
    emitting_server: support.ServerProcess, capture: Capture, database_url: str
) -> Iterator[MetaServiceClient]:
    """A client of the server that sends its events to `capture` (emptied first); the database is emptied after."""
    capture.clear()
    with MetaServiceClient(emitting_server.base_url) as client:
        yield client
    support.truncate(database_url)


def rows(spark: SparkSession, *ids: int) -> DataFrame:
    return spark.createDataFrame([(i, f"v{i}") for i in ids], "id long, value string")


def copy(inputs: Inputs) -> Mapping[str, DataFrame]:
    return {OUT: inputs.changes(RAW)}


def broken(inputs: Inputs) -> Mapping[str, DataFrame]:
    raise RuntimeError(f"cannot read {sorted(inputs)}")


def parents(events: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(eventType, parent namespace, parent job, parent run id) of each event, sorted."""
    found = []
    for event in events:
        parent = event["run"]["facets"]["parent"]
        found.append((event["eventType"], parent["job"]["namespace"], parent["job"]["name"], parent["run"]["runId"]))
    return sorted(found)


def test_an_etl_job_nests_its_runs_under_the_parent_run_of_its_environment(
    spark: SparkSession,
    emitting: MetaServiceClient,
    lake: DeltaCatalog,
    capture: Capture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task_run = str(uuid.uuid4())
    monkeypatch.setenv(ENV, f"airflow/daily.enrich/{task_run}")
    job = EtlJob(spark, emitting, lake, job_id="enrich", sources=[RAW], sinks=[OUT], future_roots=[RAW])
    job.register()
    lake.append(spark, rows(spark, 1), RAW)
    assert job.run_once(copy, mode="append").action == "process"
    lake.append(spark, rows(spark, 2), RAW)
    with pytest.raises(RuntimeError, match="cannot read"):
        job.run_once(broken, mode="append", abort_on=(RuntimeError,))  # the job aborts its barrier

    events = capture.wait_for("the COMPLETE and FAIL events", lambda e: len(e) >= 2)
    assert parents(events) == [
        ("COMPLETE", "airflow", "daily.enrich", task_run),
        ("FAIL", "airflow", "daily.enrich", task_run),
    ]


def test_a_streaming_job_nests_each_micro_batchs_run_under_its_parent_run(
    spark: SparkSession, emitting: MetaServiceClient, lake: DeltaCatalog, capture: Capture, tmp_path: Path
) -> None:
    task_run = str(uuid.uuid4())
    job = StreamingJob(
        spark,
        emitting,
        lake,
        job_id="stream",
        sources=[RAW],
        sinks=[OUT],
        checkpoint=tmp_path / "checkpoint",
        start="earliest",
        future_roots=[RAW],
        openlineage_parent=f"airflow/hourly.stream/{task_run}",
    )
    job.register()
    lake.append(spark, rows(spark, 1, 2), RAW)
    query = job.start(job.read(RAW), mode=Append(), trigger={"availableNow": True})
    query.awaitTermination(120)
    assert query.exception() is None
    assert [r.action for r in job.history] == ["process"]

    events = capture.wait_for("the COMPLETE event", lambda e: len(e) >= 1)
    assert parents(events) == [("COMPLETE", "airflow", "hourly.stream", task_run)]


def test_a_malformed_parent_run_is_refused_when_the_job_is_built(
    spark: SparkSession,
    emitting: MetaServiceClient,
    lake: DeltaCatalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def etl(**options: Any) -> EtlJob:
        return EtlJob(spark, emitting, lake, job_id="enrich", sources=[RAW], sinks=[OUT], **options)

    def streaming(**options: Any) -> StreamingJob:
        return StreamingJob(
            spark, emitting, lake, job_id="stream", sources=[RAW], sinks=[OUT], checkpoint=tmp_path, **options
        )

    expected = r"must be <namespace>/<job name>/<run id>, the run id a UUID"
    for value in ("airflow/daily.enrich", "airflow//" + str(uuid.uuid4()), f"airflow/daily.enrich/{uuid.uuid4()}x"):
        with pytest.raises(ValueError, match=f"openlineage_parent {expected}"):
            etl(openlineage_parent=value)
        with pytest.raises(ValueError, match=f"openlineage_parent {expected}"):
            streaming(openlineage_parent=value)
    monkeypatch.setenv(ENV, "airflow/daily.enrich/not-a-uuid")
    with pytest.raises(ValueError, match=f"the environment variable {ENV} {expected}"):
        etl()
    given = f"dagster/daily/enrich/{uuid.uuid4()}"  # a job name may hold '/'
    assert etl(openlineage_parent=given).openlineage_parent == given  # given wins over the environment
    assert streaming(openlineage_parent="").openlineage_parent is None  # "": none, whatever the environment says
    monkeypatch.delenv(ENV)
    assert etl().openlineage_parent is None
