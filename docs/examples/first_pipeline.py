"""Your first pipeline (docs/first-pipeline.md): an idempotent ingestion into a root table, two jobs, and a
consistent read in DuckDB.

    .venv/bin/metaservice serve                                   # in one terminal
    .venv/bin/python docs/examples/first_pipeline.py              # in another

The suite runs this file (tests/spark/test_first_pipeline.py), so what the guide shows works.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_client import DeltaCatalog, EtlJob, Inputs, MetaServiceClient, consistent_arrow
from spark_client.catalog import Catalog
from spark_client.modes import Append, Overwrite

ORDERS = "shop.raw.orders"  # the root table: data from outside the pipeline
CLEAN = "shop.mart.orders_clean"  # job 1: the valid orders
DAILY = "shop.mart.daily_revenue"  # job 2: revenue per day
FEED = "orders-feed"  # the tag of the ingestion's commits
Row = tuple[int, str, float]


# --- step 1: ingestion, safe to replay ----------------------------------------------------------------------------
def ingest(spark: SparkSession, client: MetaServiceClient, catalog: Catalog, batch: int, rows: Sequence[Row]) -> int:
    """Append batch number `batch` to the root table, then report the snapshot. A replay (the report failed, the
    process died) appends nothing twice: the commit is tagged (app_id, batch) and a tagged write finds its
    commit already in the table and returns that snapshot."""
    df = spark.createDataFrame(list(rows), "order_id long, day string, amount double")
    snapshot = catalog.write(spark, df, ORDERS, mode=Append(), app_id=FEED, barrier=batch)
    client.report_snapshot(ORDERS, snapshot)
    return snapshot


# --- step 2: two jobs -----------------------------------------------------------------------------------------------
def clean(inputs: Inputs) -> Mapping[str, DataFrame]:
    """Job 1: the orders added since the job's previous barrier, without refunds and test orders."""
    return {CLEAN: inputs.changes(ORDERS).filter(F.col("amount") > 0)}


def daily(inputs: Inputs) -> Mapping[str, DataFrame]:
    """Job 2: revenue per day over every clean order (the whole input, so the sink is overwritten)."""
    per_day = inputs[CLEAN].groupBy("day").agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
    return {DAILY: per_day}


def make_jobs(spark: SparkSession, client: MetaServiceClient, catalog: Catalog) -> tuple[EtlJob, EtlJob]:
    # the orders feed creates ORDERS with its first batch: declare it, or register refuses an unknown source
    first = EtlJob(
        spark, client, catalog, job_id="clean_orders", sources=[ORDERS], sinks=[CLEAN], future_roots=[ORDERS]
    )
    second = EtlJob(spark, client, catalog, job_id="daily_revenue", sources=[CLEAN], sinks=[DAILY])
    first.register()  # idempotent: call it on every start
    second.register()
    return first, second


def run_jobs(first: EtlJob, second: EtlJob) -> None:
    first.run_pending(clean, mode=Append())  # every barrier waiting for the job, then idle
    second.run_pending(daily, mode=Overwrite())


# --- step 3: a consistent read in DuckDB ----------------------------------------------------------------------------
def read_in_duckdb(client: MetaServiceClient, catalog: Catalog) -> dict[str, Any]:
    """Both tables at one barrier, without Spark: the daily revenue adds up to the clean orders."""
    with consistent_arrow(client, catalog, [CLEAN, DAILY]) as tables:
        con = duckdb.connect()
        con.register("orders_clean", tables[CLEAN])
        con.register("daily_revenue", tables[DAILY])
        (orders,) = con.execute("SELECT coalesce(sum(amount), 0) FROM orders_clean").fetchone() or (0,)
        (revenue,) = con.execute("SELECT coalesce(sum(revenue), 0) FROM daily_revenue").fetchone() or (0,)
        return {"barrier": tables.barrier, "snapshots": tables.snapshots, "orders": orders, "revenue": revenue}


def ingest_with_a_lost_report(
    spark: SparkSession, client: MetaServiceClient, catalog: Catalog, batch: int, rows: Sequence[Row]
) -> tuple[int, int]:
    """Batch `batch` is appended, but its report is lost (say the process died); the replay appends nothing."""
    df = spark.createDataFrame(list(rows), "order_id long, day string, amount double")
    appended = catalog.write(spark, df, ORDERS, mode=Append(), app_id=FEED, barrier=batch)  # no report: a crash
    replayed = ingest(spark, client, catalog, batch, rows)  # the replay: the same snapshot, reported now
    return appended, replayed


# --- the whole walk-through ------------------------------------------------------------------------------------------
def walk_through(spark: SparkSession, client: MetaServiceClient, catalog: Catalog) -> dict[str, Any]:
    first, second = make_jobs(spark, client, catalog)

    ingest(spark, client, catalog, 1, [(1, "2026-11-26", 20.0), (2, "2026-11-26", -5.0), (3, "2026-11-27", 7.5)])
    run_jobs(first, second)
    before = read_in_duckdb(client, catalog)

    second_batch = [(4, "2026-11-27", 12.5), (5, "2026-11-27", 30.0)]
    appended, replayed = ingest_with_a_lost_report(spark, client, catalog, 2, second_batch)
    run_jobs(first, second)
    after = read_in_duckdb(client, catalog)

    rows = catalog.read_at(spark, ORDERS, replayed).count()
    return {"before": before, "after": after, "appended": appended, "replayed": replayed, "order_rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the MetaService server")
    parser.add_argument("--lake", default=None, help="where the tables live (default: a new temporary directory)")
    args = parser.parse_args()
    spark = SparkSession.builder.master("local[2]").appName("first-pipeline").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    catalog = DeltaCatalog(args.lake or tempfile.mkdtemp(prefix="first-pipeline-"))
    with MetaServiceClient(args.url) as client:
        result = walk_through(spark, client, catalog)
    for moment in ("before", "after"):
        read = result[moment]
        print(f"barrier {read['barrier']}: orders {read['orders']} == revenue {read['revenue']} {read['snapshots']}")
    print(f"batch 2 appended as snapshot {result['appended']}, replayed as {result['replayed']}: same snapshot")
    print(f"{ORDERS} holds {result['order_rows']} rows (5 ingested, none twice)")
    spark.stop()


if __name__ == "__main__":
    main()
