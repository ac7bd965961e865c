"""A pipeline mixing Delta, Iceberg and Paimon keeps the demo's invariant at every strong read, read by Spark and
by DuckDB and Polars through `consistent_arrow` (no Spark), each table opened at the snapshot MetaService names."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_client import (
    DeltaCatalog,
    EtlJob,
    IcebergCatalog,
    Inputs,
    MetaServiceClient,
    PaimonCatalog,
    RoutingCatalog,
    consistent_arrow,
    consistent_tables,
)

pytestmark = pytest.mark.spark
ORDERS, CUSTOMERS = "lake.raw.orders", "lake.raw.customers"  # Delta, Paimon
ENRICHED, DIM, REVENUE = "lake.mart.orders_enriched", "lake.mart.customer_dim", "lake.mart.revenue_by_day"


@pytest.fixture(name="mixed")
def fx_mixed(tmp_path: Path) -> RoutingCatalog:
    """A Delta root and a Paimon root feeding Iceberg and Paimon marts."""
    iceberg, paimon = IcebergCatalog(tmp_path / "iceberg"), PaimonCatalog(tmp_path / "paimon")
    return RoutingCatalog(
        {ENRICHED: iceberg, REVENUE: iceberg, "lake.raw.customers": paimon, "lake.mart.customer_*": paimon},
        default=DeltaCatalog(tmp_path / "delta"),
    )


def enrich(inputs: Inputs) -> Mapping[str, DataFrame]:
    orders = inputs.changes(ORDERS)
    return {ENRICHED: orders.withColumn("amount", F.col("qty") * F.col("price")).drop("qty", "price")}


def dims(inputs: Inputs) -> Mapping[str, DataFrame]:
    return {DIM: inputs[CUSTOMERS].dropDuplicates(["customer_id"])}


def revenue(inputs: Inputs) -> Mapping[str, DataFrame]:
    joined = inputs[ENRICHED].join(inputs[DIM], "customer_id")
    return {REVENUE: joined.groupBy("day", "region").agg(F.sum("amount").alias("revenue"))}


def ingest(spark: SparkSession, catalog: RoutingCatalog, round_no: int) -> dict[str, int]:
    customers = [(round_no * 10 + i, ["north", "south"][i % 2]) for i in range(3)]
    known = [c for r in range(1, round_no + 1) for c in range(r * 10, r * 10 + 3)]
    orders = [
        (round_no * 1000 + i, known[i % len(known)], f"2026-11-0{1 + i % 3}", 1 + i % 4, 5 + i % 7) for i in range(30)
    ]
    return {
        CUSTOMERS: catalog.append(
            spark, spark.createDataFrame(customers, "customer_id long, region string"), CUSTOMERS
        ),
        ORDERS: catalog.append(
            spark,
            spark.createDataFrame(orders, "order_id long, customer_id long, day string, qty long, price long"),
            ORDERS,
        ),
    }


def test_a_mixed_format_pipeline_is_consistent_at_every_strong_read_in_spark_duckdb_and_polars(
    spark: SparkSession, client: MetaServiceClient, mixed: RoutingCatalog
) -> None:
    assert [mixed.format_of(t) for t in (ORDERS, CUSTOMERS, ENRICHED, DIM, REVENUE)] == [
        "delta",
        "paimon",
        "iceberg",
        "paimon",
        "iceberg",
    ]
    pipeline = {
        "enrich": (
            EtlJob(spark, client, mixed, job_id="enrich", sources=[ORDERS], sinks=[ENRICHED], future_roots=[ORDERS]),
            enrich,
            "append",
        ),
        "dims": (
            EtlJob(spark, client, mixed, job_id="dims", sources=[CUSTOMERS], sinks=[DIM], future_roots=[CUSTOMERS]),
            dims,
            "overwrite",
        ),
        "revenue": (
            EtlJob(spark, client, mixed, job_id="revenue", sources=[ENRICHED, DIM], sinks=[REVENUE]),
            revenue,
            "overwrite",
        ),
    }
    for job, _, _ in pipeline.values():
        job.register()
    barriers = []
    for round_no in (1, 2, 3):
        client.issue_barrier(ingest(spark, mixed, round_no))
        for name, (job, transform, mode) in pipeline.items():
            if name == "dims" and round_no == 2:
                continue  # dims lags a round: revenue waits for it, strong reads hold back
            job.run_pending(transform, mode=mode)  # type: ignore[arg-type]

        with consistent_tables(spark, client, mixed, [REVENUE, ENRICHED], consistency="strong") as tables:
            by_spark = {
                r["day"]: r["total"]
                for r in tables[REVENUE].groupBy("day").agg(F.sum("revenue").alias("total")).collect()
            }
            enriched_spark = {
                r["day"]: r["total"]
                for r in tables[ENRICHED].groupBy("day").agg(F.sum("amount").alias("total")).collect()
            }
            assert by_spark == enriched_spark and by_spark
            spark_barrier, spark_snapshots = tables.barrier, dict(tables.snapshots)

        with consistent_arrow(client, mixed, [REVENUE, ENRICHED], consistency="strong", holder="duckdb") as arrow:
            assert (arrow.barrier, dict(arrow.snapshots)) == (spark_barrier, spark_snapshots)
            con = duckdb.connect()
            con.register("revenue", arrow[REVENUE])
            con.register("enriched", arrow[ENRICHED])
            held = {p.reason.split(":", 1)[0] for p in client.retention(ENRICHED).protected}
            assert "lease" in held  # the read is protected while it runs
            by_duckdb = dict(
                con.sql(
                    "SELECT r.day, r.total FROM (SELECT day, sum(revenue) AS total FROM revenue GROUP BY day) r "
                    "JOIN (SELECT day, sum(amount) AS total FROM enriched GROUP BY day) e "
                    "ON r.day = e.day AND r.total = e.total"
                ).fetchall()
            )
            by_polars = dict(
                pl.scan_pyarrow_dataset(arrow[ENRICHED])
                .group_by("day")
                .agg(pl.col("amount").sum())
                .collect()
                .iter_rows()
            )
        assert by_duckdb == by_polars == by_spark  # every day's revenue matched its orders in DuckDB's join
        assert all(not p.reason.startswith("lease") for p in client.retention(ENRICHED).protected)
        barriers.append(spark_barrier)
    assert barriers[0] < barriers[2] and barriers[1] == barriers[0]  # round 2: dims lagged, the read held back


def test_each_format_reader_opens_the_snapshot_the_service_reports(
    spark: SparkSession, client: MetaServiceClient, mixed: RoutingCatalog
) -> None:
    job = EtlJob(spark, client, mixed, job_id="enrich", sources=[ORDERS], sinks=[ENRICHED], future_roots=[ORDERS])
    dims_job = EtlJob(spark, client, mixed, job_id="dims", sources=[CUSTOMERS], sinks=[DIM], future_roots=[CUSTOMERS])
    job.register()
    dims_job.register()
    dims_processed = []
    enriched_at: list[int] = []
    for round_no in (1, 2):
        ingest(spark, mixed, round_no)
        enriched_at += [
            r.barrier for r in job.run_pending(enrich, mode="append") if r.barrier is not None and r.action == "process"
        ]
        results = dims_job.run_pending(dims, mode="overwrite")
        dims_processed += [r.barrier for r in results if r.action == "process"]
    reported = client.version(ENRICHED, "weak")
    iceberg = mixed.catalog_for(ENRICHED)
    assert isinstance(iceberg, IcebergCatalog)
    ice = iceberg.pyiceberg_table(ENRICHED)
    theirs = ice.scan(snapshot_id=iceberg.iceberg_snapshot_id(ENRICHED, reported.snapshot_id)).to_arrow()
    ours = mixed.read_at(spark, ENRICHED, reported.snapshot_id).toArrow()
    assert theirs.num_rows == 60 and sorted(theirs["order_id"].to_pylist()) == sorted(ours["order_id"].to_pylist())
    summary = next(s for s in ice.metadata.snapshots if s.sequence_number == reported.snapshot_id).summary
    # the snapshot carries the barrier it was committed at; the answer may be a later barrier that
    # enrich completed idle (its input did not change there), never an earlier one
    assert summary is not None and summary["metaservice.barrier"] == str(enriched_at[-1])
    assert enriched_at[-1] <= reported.barrier
    assert summary["metaservice.job_id"] == "enrich"

    root = client.version(ORDERS, "weak").snapshot_id
    delta = mixed.catalog_for(ORDERS)
    assert DeltaTable(delta.location(ORDERS), version=root).to_pyarrow_table().num_rows == 60
    con = duckdb.connect()
    con.register("orders", mixed.arrow_dataset(ORDERS, root))  # Delta, through deltalake's own dataset
    assert con.sql("SELECT count(*), count(DISTINCT order_id) FROM orders").fetchall() == [(60, 60)]

    dim = client.version(DIM, "weak")
    paimon = mixed.catalog_for(DIM)
    assert isinstance(paimon, PaimonCatalog)
    at = paimon.paimon_table(DIM, snapshot_id=dim.snapshot_id)  # Paimon time travel to the reported snapshot
    builder = at.new_read_builder()
    customers = builder.new_read().to_arrow(builder.new_scan().plan().splits())
    assert sorted(customers["customer_id"].to_pylist()) == [10, 11, 12, 20, 21, 22]
    snapshot = at.snapshot_manager().get_snapshot_by_id(dim.snapshot_id)
    assert snapshot is not None and (snapshot.commit_user, snapshot.commit_identifier) == ("dims", dims_processed[-1])
