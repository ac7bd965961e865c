"""Ingestion steps (design rule 8): a job without sources writes data from outside; the client issues a
barrier before each run, and `next` hands that barrier to the job. Needs the server of the lineage rewrite
(before it, a job without sources is always idle)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_client import DeltaCatalog, EtlJob, Inputs, MetaServiceClient
from spark_client.modes import Append

pytestmark = pytest.mark.spark
RAW, COPY = "lake.raw.sensor_feed", "lake.mart.sensor_copy"


def test_an_ingestion_step_issues_its_barrier_and_downstream_processes_the_same_one(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog
) -> None:
    feed = [[(1, 0.5), (2, 1.5)], [(3, 2.5)]]
    ingest = EtlJob(spark, client, lake, job_id="ingest", sources=[], sinks=[RAW])
    copy = EtlJob(spark, client, lake, job_id="copy", sources=[RAW], sinks=[COPY], start="earliest")
    ingest.register()
    copy.register()
    assert ingest.is_ingestion and not copy.is_ingestion

    def load(batch: list[tuple[int, float]]) -> Callable[[Inputs], Mapping[str, DataFrame]]:
        def transform(inputs: Inputs) -> Mapping[str, DataFrame]:
            assert len(inputs) == 0
            return {RAW: spark.createDataFrame(batch, "id long, value double")}

        return transform

    barriers = []
    for batch in feed:
        results = ingest.run_pending(load(batch), mode=Append())
        assert results[0].action == "process", results  # one barrier issued, processed once
        assert sum(r.action == "process" for r in results) == 1
        barriers.append(results[0].barrier)
    assert barriers[1] > barriers[0]  # type: ignore[operator]
    version = lake.latest_snapshot(RAW)
    assert version is not None and lake.read_at(spark, RAW, version).count() == 3

    done = copy.run_pending(lambda inputs: {COPY: inputs.changes(RAW)}, mode=Append())
    assert [r.barrier for r in done if r.action == "process"] == barriers
    copied = lake.latest_snapshot(COPY)
    assert copied is not None
    assert sorted(r["id"] for r in lake.read_at(spark, COPY, copied).collect()) == [1, 2, 3]
