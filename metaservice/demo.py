"""`make demo`: a chained Spark ETL pipeline on Delta tables, kept consistent by MetaService.

    orders ──┬─► enrich ──► orders_enriched ──┬─► revenue ──► revenue_by_day
             │                                │        ▲
             └─► audit ───► order_counts ─────┴─► reconcile ──► reconciliation
    customers ─► dims ────► customer_dim ──────────────┘ (revenue also reads customer_dim)

Each round ingests new orders (and sometimes customers), issues a barrier, and runs the jobs at different
cadences. After each round it prints the barrier, every table's snapshot, a strong-consistent read whose
invariant it checks, and the lineage.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_client import DeltaCatalog, MetaServiceClient
    from spark_client.inputs import Inputs

ORDERS, CUSTOMERS = "lake.raw.orders", "lake.raw.customers"
ENRICHED, COUNTS, DIM = "lake.mart.orders_enriched", "lake.mart.order_counts", "lake.mart.customer_dim"
REVENUE, RECON = "lake.mart.revenue_by_day", "lake.mart.reconciliation"
ROUNDS = 5


def enrich(inputs: Inputs) -> Mapping[str, DataFrame]:
    from pyspark.sql import functions as F

    orders = inputs.changes(ORDERS)  # incremental: only the orders added since the last barrier
    return {ENRICHED: orders.withColumn("amount", F.col("qty") * F.col("price")).drop("qty", "price")}


def audit(inputs: Inputs) -> Mapping[str, DataFrame]:
    from pyspark.sql import functions as F

    orders = inputs[ORDERS]
    counts = orders.groupBy("day").agg(
        F.count("*").alias("orders"), F.sum(F.col("qty") * F.col("price")).alias("amount")
    )
    return {COUNTS: counts}


def dims(inputs: Inputs) -> Mapping[str, DataFrame]:
    return {DIM: inputs[CUSTOMERS].dropDuplicates(["customer_id"])}


def revenue(inputs: Inputs) -> Mapping[str, DataFrame]:
    from pyspark.sql import functions as F

    joined = inputs[ENRICHED].join(inputs[DIM], "customer_id")
    return {REVENUE: joined.groupBy("day", "region").agg(F.sum("amount").alias("revenue"))}


def reconcile(inputs: Inputs) -> Mapping[str, DataFrame]:
    from pyspark.sql import functions as F

    enriched = inputs[ENRICHED].groupBy("day").agg(F.sum("amount").alias("enriched_amount"))
    joined = inputs[COUNTS].join(enriched, "day", "full_outer")
    return {RECON: joined.withColumn("matches", F.col("amount") == F.col("enriched_amount"))}


# job id → (sources, sinks, transform, write mode, runs every N rounds)
PIPELINE: dict[str, tuple[list[str], list[str], Any, str, int]] = {
    "enrich": ([ORDERS], [ENRICHED], enrich, "append", 1),
    "audit": ([ORDERS], [COUNTS], audit, "overwrite", 1),
    "dims": ([CUSTOMERS], [DIM], dims, "overwrite", 2),
    "revenue": ([ENRICHED, DIM], [REVENUE], revenue, "overwrite", 1),
    "reconcile": ([ENRICHED, COUNTS], [RECON], reconcile, "overwrite", 2),
}


def ingest(spark: SparkSession, catalog: DeltaCatalog, round_no: int, rng: random.Random) -> dict[str, int]:
    """Append a batch of synthetic customers and orders to the root tables; return their new Delta versions."""
    from pyspark.sql import Row

    new_customers = [
        Row(customer_id=round_no * 100 + i, region=rng.choice(["north", "south", "east", "west"])) for i in range(5)
    ]
    known = [c.customer_id for c in new_customers] + [r * 100 + i for r in range(1, round_no) for i in range(5)]
    orders = [
        Row(
            order_id=round_no * 10_000 + i,
            customer_id=rng.choice(known),
            day=f"2026-11-{1 + (round_no + i) % 5:02d}",
            qty=rng.randint(1, 5),
            price=rng.randint(1, 100),
        )
        for i in range(200)
    ]
    return {
        CUSTOMERS: catalog.append(spark, spark.createDataFrame(new_customers), CUSTOMERS),
        ORDERS: catalog.append(spark, spark.createDataFrame(orders), ORDERS),
    }


def check_invariant(spark: SparkSession, client: MetaServiceClient, catalog: DeltaCatalog) -> str:
    """Revenue per day equals the sum of the enriched orders of that day, read at one strong barrier."""

    from spark_client import NoConsistentVersion

    try:
        return _checked_read(spark, client, catalog)
    except NoConsistentVersion as exc:
        return f"strong read: not yet possible ({exc.detail})"


def _checked_read(spark: SparkSession, client: MetaServiceClient, catalog: DeltaCatalog) -> str:
    from pyspark.sql import functions as F

    from spark_client import consistent_tables

    with consistent_tables(spark, client, catalog, [REVENUE, ENRICHED], consistency="strong", holder="demo") as t:
        revenue_by_day = {
            r["day"]: r["revenue"] for r in t[REVENUE].groupBy("day").agg(F.sum("revenue").alias("revenue")).collect()
        }
        enriched_by_day = {
            r["day"]: r["amount"] for r in t[ENRICHED].groupBy("day").agg(F.sum("amount").alias("amount")).collect()
        }
        if revenue_by_day != enriched_by_day:
            raise AssertionError(f"inconsistent read at barrier {t.barrier}: {revenue_by_day} != {enriched_by_day}")
        total = sum(revenue_by_day.values())
        return f"strong read @ barrier {t.barrier} {dict(t.snapshots)}: revenue == Σ enriched orders == {total} ✓"


def print_state(base_url: str) -> None:
    tables = httpx.get(f"{base_url}/tables").json()["tables"]
    print("   table                          kind          snapshot  newest barrier")
    for t in tables:
        print(
            f"   {t['table']:<30} {t['kind']:<13} {t['newest_complete_snapshot_id']!s:>8}"
            f"  {t['newest_complete_barrier']}"
        )


def print_lineage(base_url: str) -> None:
    for job in httpx.get(f"{base_url}/jobs").json()["jobs"]:
        print(f"   {', '.join(job['sources'])} ─► [{job['job_id']}] ─► {', '.join(job['sinks'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--lake", type=Path, default=None, help="lake directory (default: a temporary one)")
    parser.add_argument("--data-dir", type=Path, default=Path(".metaservice/demo"), help="embedded PostgreSQL dir")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from metaservice.db import embedded
    from metaservice.process import ServerProcess

    started = time.monotonic()
    print("▶ starting MetaService on embedded PostgreSQL …", flush=True)
    pg = embedded.start(args.data_dir.resolve())
    url = embedded.ensure_database(pg, f"demo_{int(time.time())}")
    server = ServerProcess(url, log_path=args.data_dir.resolve() / "server.log").start()
    lake = args.lake or Path(tempfile.mkdtemp(prefix="metaservice-demo-lake-"))
    print(f"  server {server.base_url}  (API docs {server.base_url}/docs, UI {server.base_url}/ui/)")
    print(f"  lake   {lake}")
    try:
        return run(server.base_url, lake, args.rounds, started)
    finally:
        server.stop()
        if args.lake is None:
            shutil.rmtree(lake, ignore_errors=True)


def run(base_url: str, lake: Path, rounds: int, started: float) -> int:
    from spark_client import DeltaCatalog, EtlJob, MetaServiceClient
    from spark_client._spark import local_session

    print("▶ starting Spark local[2] …", flush=True)
    spark = local_session("metaservice-demo")
    catalog = DeltaCatalog(str(lake))
    rng = random.Random(7)
    with MetaServiceClient(base_url) as client:
        jobs = {
            name: EtlJob(spark, client, catalog, job_id=name, sources=src, sinks=dst)
            for name, (src, dst, _t, _m, _c) in PIPELINE.items()
        }
        for job in jobs.values():
            job.register()
        print("▶ lineage")
        print_lineage(base_url)
        for round_no in range(1, rounds + 1):
            snapshots = ingest(spark, catalog, round_no, rng)
            barrier = client.issue_barrier(snapshots)
            print(
                f"\n━━ round {round_no}/{rounds}: ingested {snapshots}, "
                f"barrier {barrier.barrier} sealed {dict(barrier.sealed)}"
            )
            for name, (_s, _d, transform, mode, cadence) in PIPELINE.items():
                if round_no % cadence and round_no != rounds:
                    print(f"   {name:<10} (runs every {cadence} rounds: not this one)")
                    continue
                results = jobs[name].run_pending(transform, mode=mode)  # type: ignore[arg-type]
                done = [r for r in results if r.action == "process"]
                last = results[-1]
                print(
                    f"   {name:<10} processed {len(done)} barrier(s) {[r.barrier for r in done]}, then {last.action}"
                    + (f" (skipped {list(last.skipped)})" if last.skipped else ""),
                    flush=True,
                )
            print_state(base_url)
            print("   " + check_invariant(spark, client, catalog))
        print(f"\n✔ demo finished in {time.monotonic() - started:.0f}s")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
