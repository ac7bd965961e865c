"""DeltaCatalog on real Delta tables: exact snapshots, tagged commits, other readers agree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from spark_client import DeltaCatalog, NotAppendOnly, SchemaMismatch

pytestmark = pytest.mark.spark
T = "lake.raw.orders"


def rows(spark: SparkSession, lake: DeltaCatalog, version: int) -> list[tuple[int, str]]:
    return sorted((r["id"], r["name"]) for r in lake.read_at(spark, T, version).collect())


def test_each_version_reads_exactly_its_rows(spark: SparkSession, lake: DeltaCatalog) -> None:
    assert lake.latest_snapshot(T) is None
    v1 = lake.append(spark, spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string"), T)
    v2 = lake.append(spark, spark.createDataFrame([(3, "c")], "id long, name string"), T)
    v3 = lake.write(spark, spark.createDataFrame([(9, "z")], "id long, name string"), T, mode="overwrite")
    assert (v1, v2, v3) == (1, 2, 3) and lake.latest_snapshot(T) == 3
    assert rows(spark, lake, v1) == [(1, "a"), (2, "b")]
    assert rows(spark, lake, v2) == [(1, "a"), (2, "b"), (3, "c")]
    assert rows(spark, lake, v3) == [(9, "z")]
    assert lake.read_at(spark, T, 0).count() == 0  # the empty version right after creation


def test_another_reader_sees_identical_data(spark: SparkSession, lake: DeltaCatalog) -> None:
    data = [(i, f"n{i}") for i in range(100)]
    version = lake.append(spark, spark.createDataFrame(data, "id long, name string"), T)
    table = DeltaTable(lake.location(T), version=version).to_pyarrow_table()
    assert sorted(zip(table["id"].to_pylist(), table["name"].to_pylist(), strict=True)) == data


def test_tagged_commit_is_found_by_job_and_barrier(spark: SparkSession, lake: DeltaCatalog) -> None:
    df = spark.createDataFrame([(1, "a")], "id long, name string")
    version = lake.write(spark, df, T, mode="append", app_id="enrich", barrier=1000)
    assert DeltaTable(lake.location(T)).transaction_version("enrich") == 1000
    assert lake.committed_snapshot(T, app_id="enrich", barrier=1000) == version
    assert lake.committed_snapshot(T, app_id="enrich", barrier=1001) is None
    assert lake.committed_snapshot(T, app_id="other", barrier=1000) is None


def test_schema_change_is_rejected_and_commits_nothing(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.append(spark, spark.createDataFrame([(1, "a")], "id long, name string"), T)
    with pytest.raises(SchemaMismatch, match="name"):
        lake.append(spark, spark.createDataFrame([(1, 2)], "id long, name long"), T)
    assert lake.latest_snapshot(T) == 1


def test_changes_are_the_rows_appended_in_between(spark: SparkSession, lake: DeltaCatalog) -> None:
    v1 = lake.append(spark, spark.createDataFrame([(1, "a")], "id long, name string"), T)
    v2 = lake.append(spark, spark.createDataFrame([(2, "b"), (3, "c")], "id long, name string"), T)
    changed = lake.read_changes(spark, T, after_snapshot_id=v1, snapshot_id=v2)
    assert sorted(r["id"] for r in changed.collect()) == [2, 3]
    v3 = lake.write(spark, spark.createDataFrame([(4, "d")], "id long, name string"), T, mode="overwrite")
    with pytest.raises(NotAppendOnly):
        lake.read_changes(spark, T, after_snapshot_id=v2, snapshot_id=v3)


def test_write_killed_before_the_log_commit_leaves_the_table_unchanged(lake: DeltaCatalog, tmp_path: Path) -> None:
    script = f"""
import os
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
from pyspark.sql import SparkSession
from spark_client import DeltaCatalog
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
lake = DeltaCatalog({str(lake.root)!r})
lake.append(spark, spark.createDataFrame([(1, "a")], "id long, name string"), {T!r})
os.environ["METASERVICE_CLIENT_FAILPOINT"] = "after_files_written"
lake.append(spark, spark.createDataFrame([(2, "b")], "id long, name string"), {T!r})
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert result.returncode == -9, result.stderr.decode()[-2000:]
    assert lake.latest_snapshot(T) == 1
    assert DeltaTable(lake.location(T)).to_pyarrow_table()["id"].to_pylist() == [1]
