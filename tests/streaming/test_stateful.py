"""A stateful streaming job (a windowed aggregation with a watermark, update mode, Merge) over 22 barriers with
a driver killed in the middle: at every barrier its sink equals a batch recomputation of that barrier's inputs,
so the state came back from the checkpoint and no micro-batch was applied twice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_client import DeltaCatalog, MetaServiceClient
from spark_client._failpoints import ENV
from spark_client.streaming._offsets import journaled_offsets
from tests import support
from tests.streaming import stateful_stream as job_module
from tests.streaming.starting import started
from tests.streaming.stateful_stream import OUT, RAW

ROUNDS, CRASH_AT = 22, 11
pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(1800)]  # 22 micro-batches and a driver subprocess


def test_a_windowed_aggregation_equals_its_batch_recomputation_at_every_barrier_across_a_crash(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, server: support.ServerProcess, tmp_path: Path
) -> None:
    checkpoint = str(tmp_path / "checkpoint")
    first = job_module.make_job(spark, client, lake, checkpoint)
    lake.append(spark, job_module.batch(spark, 0), RAW)
    query = started(lambda: job_module.start(first))
    try:
        for round_ in range(CRASH_AT):
            if round_:
                lake.append(spark, job_module.batch(spark, round_), RAW)
            query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert len(first.history) == CRASH_AT

    lake.append(spark, job_module.batch(spark, CRASH_AT), RAW)
    args = [sys.executable, "-m", "tests.streaming.stateful_stream", server.base_url, lake.root, checkpoint]
    crashed = subprocess.run(
        args,
        cwd=support.REPO,
        env={**os.environ, ENV: "after_delta_commit"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert crashed.returncode == -9, crashed.stderr[-3000:]

    second = job_module.make_job(spark, client, lake, checkpoint)
    query = started(lambda: job_module.start(second))
    try:
        query.processAllAvailable()  # the killed micro-batch again, from the checkpoint's state
        for round_ in range(CRASH_AT + 1, ROUNDS):
            lake.append(spark, job_module.batch(spark, round_), RAW)
            query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert second.history[0].reused == (OUT,)  # the commit the killed driver made, found again

    results = first.history + second.history
    assert len({r.barrier for r in results}) == ROUNDS and len(results) == ROUNDS
    for result in results:
        (offset,) = journaled_offsets(checkpoint, result.batch_id)
        raw = lake.read_at(spark, RAW, offset.inputs[RAW].snapshot)
        expected = sorted(tuple(r) for r in job_module.aggregate(raw).collect())
        got = sorted(tuple(r) for r in lake.read_at(spark, OUT, result.snapshots[OUT]).collect())
        assert got == expected, f"barrier {result.barrier} (micro-batch {result.batch_id})"
