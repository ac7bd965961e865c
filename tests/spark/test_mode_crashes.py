"""Every write mode is exactly-once per barrier: a driver killed after the files, after the Delta commit or
before reporting to MetaService, then run again, leaves each barrier's rows in the sink exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_client import DeltaCatalog, MetaServiceClient
from tests.spark import crash_job
from tests.support import ServerProcess

pytestmark = [pytest.mark.spark, pytest.mark.crash, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
FAILPOINTS = ["after_files_written", "after_delta_commit", "before_metaservice_commit"]
# Each case starts and kills a driver JVM (about a minute). `make test` runs a covering subset — every mode once,
# every failpoint at least once — and `make soak` the whole 5 x 3 product (tests/conftest.py marks these `soak`).
COVERING = {
    "append-after_files_written",
    "merge-after_delta_commit",
    "overwrite-before_metaservice_commit",
    "overwrite_partitions-after_files_written",
    "replace_where-after_delta_commit",
}
SOAK_ONLY = {f"{mode}-{point}" for mode in crash_job.MODES for point in FAILPOINTS} - COVERING


@pytest.mark.parametrize("failpoint", FAILPOINTS)
@pytest.mark.parametrize("mode", sorted(crash_job.MODES))
def test_a_driver_killed_at_a_failpoint_applies_the_mode_exactly_once_after_a_rerun(
    spark: SparkSession,
    client: MetaServiceClient,
    lake: DeltaCatalog,
    server: ServerProcess,
    mode: str,
    failpoint: str,
) -> None:
    job = crash_job.make_job(spark, client, lake)
    job.register()
    lake.append(spark, crash_job.batch(spark, 1), crash_job.RAW)
    assert crash_job.run(job, mode, 1).action == "process"  # the sink exists: the mode has rows to replace
    before = lake.latest_snapshot(crash_job.OUT)
    lake.append(spark, crash_job.batch(spark, 2), crash_job.RAW)

    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}
    env["METASERVICE_CLIENT_FAILPOINT"] = failpoint
    crashed = subprocess.run(
        [sys.executable, "-m", "tests.spark.crash_job", server.base_url, lake.root, mode],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert crashed.returncode == -9, crashed.stderr.decode()[-3000:]
    in_flight = client.get_job("events")["in_flight_barrier"]
    assert in_flight is not None
    committed = lake.latest_snapshot(crash_job.OUT)
    assert committed == (before if failpoint == "after_files_written" else before + 1)  # type: ignore[operator]

    rerun = crash_job.run(crash_job.make_job(spark, client, lake), mode, 2)
    assert rerun.action == "process" and rerun.barrier == in_flight
    assert rerun.reused == (() if failpoint == "after_files_written" else (crash_job.OUT,))
    version = lake.latest_snapshot(crash_job.OUT)
    assert rerun.snapshots == {crash_job.OUT: version} and version == before + 1  # type: ignore[operator]
    rows = sorted(tuple(r) for r in lake.read_at(spark, crash_job.OUT, version).collect())
    assert len(rows) == len(crash_job.expected(mode)) and rows == crash_job.expected(mode)
    assert client.versions([crash_job.OUT], "weak").versions == {crash_job.OUT: version}
