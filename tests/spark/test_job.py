"""EtlJob end to end for every format: real Spark, real Delta/Iceberg/Paimon tables, the real server over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_client import Catalog, EtlJob, Inputs, MetaServiceClient, PermanentFailure, consistent_tables
from tests.spark.formats import COMMIT_FAILPOINT
from tests.support import ServerProcess

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]
ORDERS, CUSTOMERS = "lake.raw.orders", "lake.raw.customers"
ENRICHED, DIM, REVENUE = "lake.mart.orders_enriched", "lake.mart.customer_dim", "lake.mart.revenue"


@pytest.fixture(name="lake")
def fx_lake(catalog: Catalog) -> Catalog:
    """Every test of this module runs once per format."""
    return catalog


def enrich(inputs: Inputs) -> Mapping[str, DataFrame]:
    return {ENRICHED: inputs.changes(ORDERS).withColumn("amount", F.col("qty") * 10)}


def dims(inputs: Inputs) -> Mapping[str, DataFrame]:
    return {DIM: inputs[CUSTOMERS]}


def revenue(inputs: Inputs) -> Mapping[str, DataFrame]:
    joined = inputs[ENRICHED].join(inputs[DIM], "customer_id")
    return {REVENUE: joined.groupBy("region").agg(F.sum("amount").alias("revenue"))}


def orders(spark: SparkSession, first: int, count: int) -> DataFrame:
    return spark.createDataFrame(
        [(i, i % 3, 1 + i % 4) for i in range(first, first + count)],
        "order_id long, customer_id long, qty long",
    )


def customers(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([(0, "north"), (1, "south"), (2, "east")], "customer_id long, region string")


def jobs(spark: SparkSession, client: MetaServiceClient, lake: Catalog) -> dict[str, EtlJob]:
    made = {
        "enrich": EtlJob(
            spark, client, lake, job_id="enrich", sources=[ORDERS], sinks=[ENRICHED], future_roots=[ORDERS]
        ),
        "dims": EtlJob(spark, client, lake, job_id="dims", sources=[CUSTOMERS], sinks=[DIM], future_roots=[CUSTOMERS]),
        "revenue": EtlJob(spark, client, lake, job_id="revenue", sources=[ENRICHED, DIM], sinks=[REVENUE]),
    }
    for job in made.values():
        job.register()
        job.register()  # idempotent
    return made


def test_pipeline_through_the_library_is_consistent_at_every_barrier(
    spark: SparkSession, client: MetaServiceClient, lake: Catalog
) -> None:
    pipeline = jobs(spark, client, lake)
    lake.append(spark, customers(spark), CUSTOMERS)
    for round_no in range(3):
        lake.append(spark, orders(spark, round_no * 10, 10), ORDERS)
        first = pipeline["enrich"].run_once(enrich, mode="append")
        assert first.action == "process"
        if round_no == 0:
            # no barrier sealed a customers snapshot yet, so the first barrier never completes in customer_dim
            # (its writer's root input has no data there): revenue skips it rather than waiting for it forever
            skipped = pipeline["revenue"].run_once(revenue)
            assert (skipped.action, skipped.skipped) == ("idle", (first.barrier,))
        assert pipeline["dims"].run_once(dims).action in ("process", "idle")
        done = pipeline["revenue"].run_pending(revenue)
        processed = [r.barrier for r in done if r.action == "process"]
        assert done[-1].action == "idle" and processed and processed[-1] >= first.barrier  # type: ignore[operator]
        with consistent_tables(spark, client, lake, [REVENUE, ENRICHED]) as tables:
            assert tables.barrier == processed[-1]
            total = tables[REVENUE].agg(F.sum("revenue")).collect()[0][0]
            assert total == tables[ENRICHED].agg(F.sum("amount")).collect()[0][0]
            assert tables[ENRICHED].count() == 10 * (round_no + 1)  # appended once per barrier, never twice
    history = client.get_job("revenue")
    assert history["in_flight_barrier"] is None


def test_a_failed_transform_leaves_the_barrier_for_a_retry_and_permanent_failure_aborts(
    spark: SparkSession, client: MetaServiceClient, lake: Catalog
) -> None:
    job = jobs(spark, client, lake)["enrich"]
    lake.append(spark, orders(spark, 0, 5), ORDERS)

    def broken(_inputs: Inputs) -> Mapping[str, DataFrame]:
        raise RuntimeError("transient")

    with pytest.raises(RuntimeError):
        job.run_once(broken)
    offered = client.next_barrier("enrich")
    assert offered.action == "process"
    result = job.run_once(enrich, mode="append")
    assert result.barrier == offered.barrier and lake.read_at(spark, ENRICHED, result.snapshots[ENRICHED]).count() == 5

    lake.append(spark, orders(spark, 5, 5), ORDERS)

    def hopeless(_inputs: Inputs) -> Mapping[str, DataFrame]:
        raise PermanentFailure("corrupt input")

    with pytest.raises(PermanentFailure):
        job.run_once(hopeless)
    runs = client._call("GET", "/jobs/enrich/barriers")["runs"]
    assert runs[0]["status"] == "aborted" and "corrupt input" in runs[0]["reason"]


KILL_POINTS = ["after_files_written", "after_table_commit", "before_metaservice_commit"]
# Each case starts and kills a driver JVM. `make test` runs every kill point on Delta and the table commit of the
# other formats (their own commit path); `make soak` the whole 3 x 3 product (tests/conftest.py marks these).
SOAK_ONLY = {f"{fmt}-{point}" for fmt in ("iceberg", "paimon") for point in KILL_POINTS} - {
    "iceberg-after_table_commit",
    "paimon-after_table_commit",
}


@pytest.mark.crash
@pytest.mark.parametrize("kill_point", KILL_POINTS)
def test_job_killed_at_a_failpoint_writes_each_barrier_exactly_once_after_rerun(
    spark: SparkSession,
    client: MetaServiceClient,
    lake: Catalog,
    server: ServerProcess,
    kill_point: str,
    tmp_path: Path,
) -> None:
    failpoint = COMMIT_FAILPOINT[lake.format] if kill_point == "after_table_commit" else kill_point
    jobs(spark, client, lake)
    lake.append(spark, orders(spark, 0, 7), ORDERS)
    script = textwrap.dedent(
        f"""
        import os
        from pyspark.sql import SparkSession, functions as F
        from spark_client import EtlJob, MetaServiceClient
        from tests.spark.formats import make_catalog
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        client = MetaServiceClient({server.base_url!r})
        lake = make_catalog({lake.format!r}, {str(tmp_path / "lake")!r})
        job = EtlJob(spark, client, lake, job_id="enrich", sources=[{ORDERS!r}], sinks=[{ENRICHED!r}])
        enrich = lambda i: {{{ENRICHED!r}: i.changes({ORDERS!r}).withColumn("amount", F.col("qty") * 10)}}
        job.run_once(enrich, mode="append")
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "METASERVICE_CLIENT_FAILPOINT": failpoint,
    }
    crashed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=240)
    assert crashed.returncode == -9, crashed.stderr.decode()[-3000:]
    in_flight = client.get_job("enrich")["in_flight_barrier"]
    assert in_flight is not None

    rerun = EtlJob(spark, client, lake, job_id="enrich", sources=[ORDERS], sinks=[ENRICHED]).run_once(
        enrich, mode="append"
    )
    assert rerun.action == "process" and rerun.barrier == in_flight
    assert rerun.reused == (() if failpoint == "after_files_written" else (ENRICHED,))
    version = lake.latest_snapshot(ENRICHED)
    assert version is not None and rerun.snapshots == {ENRICHED: version}
    assert lake.read_at(spark, ENRICHED, version).count() == 7  # exactly once
    assert client.versions([ENRICHED], "weak").versions == {ENRICHED: version}


def test_consistent_read_returns_exactly_the_named_snapshots_while_jobs_write(
    spark: SparkSession, client: MetaServiceClient, lake: Catalog
) -> None:
    pipeline = jobs(spark, client, lake)
    lake.append(spark, customers(spark), CUSTOMERS)
    lake.append(spark, orders(spark, 0, 10), ORDERS)
    for name, transform in (("enrich", enrich), ("dims", dims), ("revenue", revenue)):
        pipeline[name].run_pending(transform, mode="append" if name == "enrich" else "overwrite")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for n in range(1, 4):
                lake.append(spark, orders(spark, n * 10, 10), ORDERS)
                pipeline["enrich"].run_once(enrich, mode="append")
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            stop.set()

    with consistent_tables(spark, client, lake, [ENRICHED, REVENUE], consistency="strong") as tables:
        expected = lake.read_at(spark, ENRICHED, tables.snapshots[ENRICHED]).count()
        thread = threading.Thread(target=writer)
        thread.start()
        thread.join(timeout=300)
        assert stop.is_set() and not errors, errors
        assert (lake.latest_snapshot(ENRICHED) or -1) > tables.snapshots[ENRICHED]  # the job did move on
        assert tables[ENRICHED].count() == expected == 10
        retention = client.retention(ENRICHED)
        assert any(
            p.reason == "lease:" + p.reason.split(":", 1)[1] and p.snapshot_id == tables.snapshots[ENRICHED]
            for p in retention.protected
        )
    assert all(not p.reason.startswith("lease:") for p in client.retention(ENRICHED).protected)
