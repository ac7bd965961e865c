"""Safe retention (vacuum/expiry never removes a protected snapshot) and rollback of downstream tables, end to end,
for every format."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_client import Catalog, EtlJob, Inputs, MetaServiceClient, apply_rollback, consistent_tables
from tests.spark.formats import snapshot_files

pytestmark = pytest.mark.spark
Transform = Callable[[Inputs], Mapping[str, DataFrame]]
ORDERS, TOTALS, REPORT = "lake.raw.orders", "lake.mart.totals", "lake.mart.report"


@pytest.fixture(name="lake")
def fx_lake(catalog: Catalog) -> Catalog:
    """Every test of this module runs once per format."""
    return catalog


def totals(inputs: Inputs) -> Mapping[str, DataFrame]:
    return {TOTALS: inputs[ORDERS].groupBy("day").agg(F.sum("amount").alias("amount"))}


def report(inputs: Inputs) -> Mapping[str, DataFrame]:
    return {REPORT: inputs[TOTALS].agg(F.sum("amount").alias("total"), F.count("*").alias("days"))}


def orders(spark: SparkSession, rows: list[tuple[int, int]]) -> DataFrame:
    return spark.createDataFrame(rows, "day long, amount long")


def pipeline(spark: SparkSession, client: MetaServiceClient, lake: Catalog) -> list[tuple[EtlJob, Transform]]:
    jobs: list[tuple[EtlJob, Transform]] = [
        (EtlJob(spark, client, lake, job_id="totals", sources=[ORDERS], sinks=[TOTALS], future_roots=[ORDERS]), totals),
        (EtlJob(spark, client, lake, job_id="report", sources=[TOTALS], sinks=[REPORT]), report),
    ]
    for job, _ in jobs:
        job.register()
    return jobs


def run_all(jobs: list[tuple[EtlJob, Transform]]) -> None:
    for job, transform in jobs:
        job.run_pending(transform)


def test_vacuum_keeps_what_a_lease_protects_and_reclaims_it_afterwards(
    spark: SparkSession, client: MetaServiceClient, lake: Catalog
) -> None:
    jobs = pipeline(spark, client, lake)
    lake.append(spark, orders(spark, [(1, 10)]), ORDERS)
    run_all(jobs)
    with consistent_tables(spark, client, lake, [TOTALS], consistency="strong") as tables:
        held = tables.snapshots[TOTALS]
        held_files = snapshot_files(lake, TOTALS, held)
        expected = sorted(map(tuple, tables[TOTALS].collect()))
        for n in range(2, 5):  # totals is overwritten at each barrier: older files become unreferenced
            lake.append(spark, orders(spark, [(n, n * 10)]), ORDERS)
            run_all(jobs)
            deleted = lake.vacuum(TOTALS, client)
            assert held_files and all(os.path.exists(f) for f in held_files)
            assert sorted(map(tuple, lake.read_at(spark, TOTALS, held).collect())) == expected
        assert deleted == []  # everything since the leased version is protected
        assert (lake.latest_snapshot(TOTALS) or -1) > held
    reclaimed = lake.vacuum(TOTALS, client)
    assert reclaimed and not any(os.path.exists(f) for f in reclaimed)
    assert set(reclaimed) & set(held_files)
    newest = lake.latest_snapshot(TOTALS)
    assert newest is not None and lake.read_at(spark, TOTALS, newest).count() == 4


def test_rollback_recomputes_downstream_from_the_corrected_root(
    spark: SparkSession, client: MetaServiceClient, lake: Catalog
) -> None:
    jobs = pipeline(spark, client, lake)
    lake.append(spark, orders(spark, [(1, 10), (2, 20)]), ORDERS)
    run_all(jobs)
    good = client.versions([REPORT], "strong").barrier
    lake.append(spark, orders(spark, [(3, -999)]), ORDERS)  # bad rows
    run_all(jobs)
    lake.append(spark, orders(spark, [(4, 40)]), ORDERS)
    run_all(jobs)
    assert client.versions([REPORT], "strong").barrier > good

    plan = client.plan_rollback(ORDERS, good)
    assert set(plan.tables) == {ORDERS, TOTALS, REPORT} and set(plan.jobs) == {"totals", "report"}
    apply_rollback(client, lake, plan)
    lake.append(spark, orders(spark, [(4, 40)]), ORDERS)  # the corrected data: day 3 dropped, day 4 again
    run_all(jobs)

    with consistent_tables(spark, client, lake, [REPORT, TOTALS], consistency="strong") as tables:
        got = tables[REPORT].first()
        assert got is not None and (got["total"], got["days"]) == (70, 3)
        assert sorted(map(tuple, tables[TOTALS].collect())) == [(1, 10), (2, 20), (4, 40)]
        assert tables.barrier > good
