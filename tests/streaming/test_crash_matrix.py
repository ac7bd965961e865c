"""The crash matrix: a streaming job's driver killed (SIGKILL) at each point of a micro-batch, in every format,
with both triggers and on both paths (the rows through the stream, `job.start`; the barrier's files read by
Spark's parquet reader, `job.start_stateless`), then restarted from its checkpoint: 0 duplicate and 0 missing rows
against a batch recomputation of the same barriers.

One subprocess per case runs the query until the failpoint kills it; the restart runs in this process's Spark
(one JVM start-up per case, about a minute a case on 2 cores). The module is marked `soak`: `make test` leaves it
out, `make soak` runs all 48 cases (`METASERVICE_STREAM_MATRIX=full`: 3 formats, 4 points, 2 triggers, 2
paths); without that variable it runs a representative subset of ten (every format, every crash point, both
triggers, on each path), as `pytest -m soak tests/streaming/test_crash_matrix.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_client import MetaServiceClient
from spark_client._failpoints import ENV
from spark_client.catalog import Catalog
from spark_client.streaming._offsets import journaled_offsets
from tests import support
from tests.spark.formats import COMMIT_FAILPOINT, FORMATS, make_catalog
from tests.streaming import crash_stream
from tests.streaming.crash_stream import OUT, PATHS, RAW

# a driver subprocess and three queries per case
pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(1200)]
POINTS = ("after_files_written", "after_table_commit", "after_metaservice_commit", "before_spark_commit_log")
TRIGGERS = ("availableNow", "processingTime")
FULL = [(f, p, t, path) for path in PATHS for f in FORMATS for p in POINTS for t in TRIGGERS]
SUBSET = [
    ("delta", "after_files_written", "availableNow", "rows"),
    ("iceberg", "after_table_commit", "processingTime", "rows"),
    ("paimon", "after_metaservice_commit", "availableNow", "rows"),
    ("delta", "before_spark_commit_log", "processingTime", "rows"),
    ("paimon", "after_table_commit", "availableNow", "rows"),
    ("iceberg", "before_spark_commit_log", "availableNow", "rows"),
    ("delta", "after_table_commit", "processingTime", "files"),
    ("iceberg", "after_files_written", "availableNow", "files"),
    ("paimon", "before_spark_commit_log", "processingTime", "files"),
    ("delta", "after_metaservice_commit", "availableNow", "files"),
]
CASES = FULL if os.environ.get("METASERVICE_STREAM_MATRIX") == "full" else SUBSET


def recomputed(spark: SparkSession, catalog: Catalog, snapshot: int) -> Counter[tuple[object, ...]]:
    """The sink's rows as a batch job computes them from the raw table at `snapshot`."""
    return Counter(tuple(r) for r in crash_stream.transform(catalog.read_at(spark, RAW, snapshot)).collect())


def sink_rows(spark: SparkSession, catalog: Catalog, snapshot: int) -> Counter[tuple[object, ...]]:
    return Counter(tuple(r) for r in catalog.read_at(spark, OUT, snapshot).collect())


@pytest.mark.parametrize(("format_name", "point", "trigger", "path"), CASES)
def test_a_driver_killed_in_a_micro_batch_restarts_from_its_checkpoint_without_duplicates_or_losses(
    spark: SparkSession,
    client: MetaServiceClient,
    server: support.ServerProcess,
    tmp_path: Path,
    format_name: str,
    point: str,
    trigger: str,
    path: str,
) -> None:
    catalog = make_catalog(format_name, tmp_path / "lake")
    checkpoint = str(tmp_path / "checkpoint")
    failpoint = COMMIT_FAILPOINT[format_name] if point == "after_table_commit" else point
    catalog.append(spark, crash_stream.batch(spark, 0, 6), RAW)
    first = crash_stream.make_job(spark, client, catalog, checkpoint)
    crash_stream.run(first, trigger, path)  # barrier 1, in this process: the sink exists
    catalog.append(spark, crash_stream.batch(spark, 100, 7), RAW)

    root = str(tmp_path / "lake")
    args = [
        sys.executable,
        "-m",
        "tests.streaming.crash_stream",
        server.base_url,
        format_name,
        root,
        checkpoint,
        trigger,
        path,
    ]
    crashed = subprocess.run(
        args, cwd=support.REPO, env={**os.environ, ENV: failpoint}, capture_output=True, text=True, timeout=300
    )
    assert crashed.returncode == -9, f"the driver was not killed at {failpoint}: {crashed.stderr[-8000:]}"

    catalog.append(spark, crash_stream.batch(spark, 200, 5), RAW)  # after the restart: one more barrier
    second = crash_stream.make_job(spark, client, catalog, checkpoint)
    crash_stream.run(second, trigger, path)

    committed = [r for r in first.history + second.history if r.action in ("process", "replayed")]
    barriers = [r.barrier for r in committed]
    assert len(set(barriers)) == 3 and len(barriers) in (3, 4), committed  # 4: the killed batch replayed
    for result in committed:  # every barrier's sink snapshot is its batch recomputation, as a multiset
        (offset,) = [o for o in journaled_offsets(checkpoint, result.batch_id) if o.table == RAW]
        assert offset.barrier == result.barrier
        expected = recomputed(spark, catalog, offset.inputs[RAW].snapshot)
        assert sink_rows(spark, catalog, result.snapshots[OUT]) == expected, (result, point)
    replay = second.history[0]  # the micro-batch the driver died in, run again
    assert replay.reused == (() if point == "after_files_written" else (OUT,)), replay
    versions = client.versions([RAW, OUT], "strong")
    assert versions.barrier == barriers[-1] and versions.versions[RAW] == catalog.latest_snapshot(RAW)
    assert sink_rows(spark, catalog, versions.versions[OUT]) == recomputed(spark, catalog, versions.versions[RAW])
    assert versions.versions[OUT] == catalog.latest_snapshot(OUT)
