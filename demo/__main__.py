"""`make demo [FORMAT=delta|iceberg|paimon]`: a chained Spark ETL pipeline, kept consistent by MetaService.

    orders ──┬─► enrich ──► orders_enriched ──┬─► revenue ──► revenue_by_day
             │                                │        ▲
             │                                ├─► spend (streaming) ──► customer_spend
             └─► audit ───► order_counts ─────┴─► reconcile ──► reconciliation
    customers ─► dims ────► customer_dim ──────────────┘ (revenue also reads customer_dim)

Each round ingests new orders (and sometimes customers), issues a barrier, and runs the jobs at different
cadences, each sink with the write mode a real job would use: `enrich` appends the new orders, `dims` MERGEs
new customers on their key, `audit` and `revenue` recompute only the days the new orders touch and overwrite
those partitions, `reconcile` rewrites its small table whole. `spend` is a Structured Streaming query (running
sums per customer, upserted with MERGE) started each round with the `availableNow` trigger: one micro-batch per
barrier, then it stops, like a scheduled incremental job. After each round it prints the barrier, every table's
snapshot, a strong-consistent read of batch and streaming sinks whose invariant it checks, and the lineage.
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
from typing import TYPE_CHECKING, Any, cast

import httpx

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_client import Catalog, MetaServiceClient
    from spark_client.inputs import Inputs
    from spark_client.modes import ModeSpec
    from spark_client.streaming import StreamingJob

ORDERS, CUSTOMERS = "lake.raw.orders", "lake.raw.customers"
ENRICHED, COUNTS, DIM = "lake.mart.orders_enriched", "lake.mart.order_counts", "lake.mart.customer_dim"
REVENUE, RECON = "lake.mart.revenue_by_day", "lake.mart.reconciliation"
SPEND = "lake.mart.customer_spend"  # written by the streaming job
ROUNDS = 5
FORMATS = ("delta", "iceberg", "paimon")


def enrich(inputs: Inputs) -> Mapping[str, DataFrame]:  # Append
    from pyspark.sql import functions as F

    orders = inputs.changes(ORDERS)  # incremental: only the orders added since the last barrier
    return {ENRICHED: orders.withColumn("amount", F.col("qty") * F.col("price")).drop("qty", "price")}


def audit(inputs: Inputs) -> Mapping[str, DataFrame]:  # OverwritePartitions(day)
    from pyspark.sql import functions as F

    touched = inputs.changes(ORDERS).select("day").distinct()  # the days the new orders fall on
    orders = inputs[ORDERS].join(touched, "day")  # those days whole, so their counts are complete
    counts = orders.groupBy("day").agg(
        F.count("*").alias("orders"), F.sum(F.col("qty") * F.col("price")).alias("amount")
    )
    return {COUNTS: counts}


def dims(inputs: Inputs) -> Mapping[str, DataFrame]:  # Merge(customer_id)
    return {DIM: inputs.changes(CUSTOMERS).dropDuplicates(["customer_id"])}


def revenue(inputs: Inputs) -> Mapping[str, DataFrame]:  # OverwritePartitions(day)
    from pyspark.sql import functions as F

    touched = inputs.changes(ENRICHED).select("day").distinct()
    joined = inputs[ENRICHED].join(touched, "day").join(inputs[DIM], "customer_id")
    return {REVENUE: joined.groupBy("day", "region").agg(F.sum("amount").alias("revenue"))}


def reconcile(inputs: Inputs) -> Mapping[str, DataFrame]:  # Overwrite
    from pyspark.sql import functions as F

    enriched = inputs[ENRICHED].groupBy("day").agg(F.sum("amount").alias("enriched_amount"))
    joined = inputs[COUNTS].join(enriched, "day", "full_outer")
    return {RECON: joined.withColumn("matches", F.col("amount") == F.col("enriched_amount"))}


def pipeline() -> dict[str, tuple[list[str], list[str], Any, ModeSpec, int]]:
    """job id → (sources, sinks, transform, write mode, runs every N rounds)."""
    from spark_client.modes import Append, Merge, Overwrite, OverwritePartitions

    return {
        "enrich": ([ORDERS], [ENRICHED], enrich, Append(), 1),
        "audit": ([ORDERS], [COUNTS], audit, OverwritePartitions(columns=("day",)), 1),
        "dims": ([CUSTOMERS], [DIM], dims, Merge(keys=("customer_id",)), 2),
        "revenue": ([ENRICHED, DIM], [REVENUE], revenue, OverwritePartitions(columns=("day",)), 1),
        "reconcile": ([ENRICHED, COUNTS], [RECON], reconcile, Overwrite(), 2),
    }


def ingest(spark: SparkSession, catalog: Catalog, round_no: int, rng: random.Random) -> dict[str, int]:
    """Append round `round_no`'s batch of synthetic customers and orders to the root tables, each unless storage
    holds it already; return both tables' newest snapshots, to report together (`issue_barrier`).

    Idempotent: append, then report; a replay after a failed report (a crash, the server away) finds the
    round's rows by their keys and appends nothing twice. The roots form a root group, so no job's `next`
    seals the orders appended here before the customers are."""
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
        CUSTOMERS: _append_once(spark, catalog, CUSTOMERS, new_customers, key="customer_id", batch=(round_no, 100)),
        ORDERS: _append_once(spark, catalog, ORDERS, orders, key="order_id", batch=(round_no, 10_000)),
    }


def _append_once(
    spark: SparkSession, catalog: Catalog, table: str, rows: list[Any], *, key: str, batch: tuple[int, int]
) -> int:
    """Append `rows` unless the table holds the batch (keys from round * step on); the table's newest snapshot."""
    from pyspark.sql import functions as F

    round_no, step = batch
    newest = catalog.latest_snapshot(table)
    if newest is not None:
        held = catalog.read_at(spark, table, newest).where(
            F.col(key).between(round_no * step, (round_no + 1) * step - 1)
        )
        if not held.isEmpty():
            return newest
    return catalog.append(spark, spark.createDataFrame(rows), table)


def run_spend(job: StreamingJob) -> str:
    """The streaming job: every sealed barrier of `orders_enriched` not yet processed, one micro-batch each, then
    stop (`availableNow`); the checkpoint carries the running sums to the next round."""
    from pyspark.sql import functions as F

    from spark_client.modes import Merge

    before = len(job.history)
    spend = job.read(ENRICHED).groupBy("customer_id").agg(F.sum("amount").alias("spend"))
    query = job.start(spend, mode=Merge(keys=("customer_id",)), output_mode="update", trigger={"availableNow": True})
    query.awaitTermination()
    if (error := query.exception()) is not None:
        raise RuntimeError(f"the streaming job spend failed: {error}")
    done = [r.barrier for r in job.history[before:] if r.action == "process"]
    return f"   {'spend':<10} streamed {len(done)} micro-batch(es), one per barrier {done}"


def check_invariant(spark: SparkSession, client: MetaServiceClient, catalog: Catalog) -> str:
    """Revenue per day equals the sum of the enriched orders of that day, and the streaming job's spend of every
    customer sums to the same total, read at one strong barrier."""

    from spark_client import NoConsistentVersion

    try:
        return _checked_read(spark, client, catalog)
    except NoConsistentVersion as exc:
        return f"strong read: not yet possible ({exc.detail})"


def _checked_read(spark: SparkSession, client: MetaServiceClient, catalog: Catalog) -> str:
    from pyspark.sql import functions as F

    from spark_client import consistent_tables

    tables = [REVENUE, ENRICHED, SPEND]
    with consistent_tables(spark, client, catalog, tables, consistency="strong", holder="demo") as t:
        revenue_by_day = {
            r["day"]: r["revenue"] for r in t[REVENUE].groupBy("day").agg(F.sum("revenue").alias("revenue")).collect()
        }
        enriched_by_day = {
            r["day"]: r["amount"] for r in t[ENRICHED].groupBy("day").agg(F.sum("amount").alias("amount")).collect()
        }
        if revenue_by_day != enriched_by_day:
            raise AssertionError(f"inconsistent read at barrier {t.barrier}: {revenue_by_day} != {enriched_by_day}")
        total = sum(revenue_by_day.values())
        spent = t[SPEND].agg(F.sum("spend")).first()[0] or 0  # type: ignore[index]
        if spent != total:
            raise AssertionError(f"inconsistent read at barrier {t.barrier}: streamed spend {spent} != {total}")
        return (
            f"strong read @ barrier {t.barrier} {dict(t.snapshots)}: "
            f"revenue == Σ enriched orders == Σ streamed spend == {total} ✓"
        )


def print_state(base_url: str) -> None:
    tables = httpx.get(f"{base_url}/tables").json()["tables"]
    print("   table                          kind          snapshot  newest barrier")
    for t in tables:
        print(
            f"   {t['table']:<30} {t['kind']:<13} {t['newest_complete_snapshot_id']!s:>8}"
            f"  {t['newest_complete_barrier']}"
        )


def print_lineage(base_url: str, modes: Mapping[str, object]) -> None:
    for job in httpx.get(f"{base_url}/jobs").json()["jobs"]:
        mode = modes.get(job["job_id"], "")
        print(f"   {', '.join(job['sources'])} ─► [{job['job_id']}] ─► {', '.join(job['sinks'])}   ({mode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--lake", type=Path, default=None, help="lake directory (default: a temporary one)")
    parser.add_argument("--data-dir", type=Path, default=Path(".metaservice/demo"), help="embedded PostgreSQL dir")
    parser.add_argument("--format", choices=FORMATS, default="delta", help="table format of every table")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from metaservice.db import embedded
    from tests.support import ServerProcess  # the demo runs from a checkout (`make demo`)

    started = time.monotonic()
    print("▶ starting MetaService on embedded PostgreSQL …", flush=True)
    pg = embedded.start(args.data_dir.resolve())
    url = embedded.ensure_database(pg, f"demo_{int(time.time())}")
    server = ServerProcess(url, log_path=args.data_dir.resolve() / "server.log").start()
    lake = args.lake or Path(tempfile.mkdtemp(prefix="metaservice-demo-lake-"))
    print(f"  server {server.base_url}  (API docs {server.base_url}/docs, UI {server.base_url}/ui/)")
    print(f"  lake   {lake}")
    try:
        return run(server.base_url, lake, args.rounds, started, table_format=args.format)
    finally:
        server.stop()
        if args.lake is None:
            shutil.rmtree(lake, ignore_errors=True)


def make_catalog(table_format: str, lake: Path) -> Catalog:
    """The catalog of `table_format` rooted at `lake`."""
    from spark_client import DeltaCatalog, IcebergCatalog, PaimonCatalog

    if table_format == "iceberg":
        return IcebergCatalog(lake)
    if table_format == "paimon":
        return PaimonCatalog(lake)
    return cast("Catalog", DeltaCatalog(lake))  # a Catalog structurally (typed as one for this factory)


def run(base_url: str, lake: Path, rounds: int, started: float, *, table_format: str = "delta") -> int:
    from spark_client import EtlJob, MetaServiceClient
    from spark_client._spark import local_session

    print(f"▶ starting Spark local[2] ({table_format} tables) …", flush=True)
    spark = local_session("metaservice-demo")
    catalog = make_catalog(table_format, lake)
    rng = random.Random(7)
    steps = pipeline()
    with MetaServiceClient(base_url) as client:
        jobs = {
            # the roots are appended after registration (`ingest`): declared, or register refuses them as unknown
            name: EtlJob(
                spark,
                client,
                catalog,
                job_id=name,
                sources=src,
                sinks=dst,
                future_roots=[t for t in src if t in (ORDERS, CUSTOMERS)],
            )
            for name, (src, dst, _t, _m, _c) in steps.items()
        }
        for job in jobs.values():
            job.register()
        from spark_client.streaming import StreamingJob

        spend = StreamingJob(
            spark,
            client,
            catalog,
            job_id="spend",
            sources=[ENRICHED],
            sinks=[SPEND],
            checkpoint=lake / "_checkpoints" / "spend",
            start="earliest",
        )
        spend.register()
        client.set_root_group("demo-ingest", [ORDERS, CUSTOMERS])  # written together: sealed only together
        print("▶ lineage (write mode of each job)")
        modes: dict[str, object] = {name: step[3] for name, step in steps.items()}
        print_lineage(base_url, {**modes, "spend": "streaming, availableNow, Merge(customer_id)"})
        for round_no in range(1, rounds + 1):
            snapshots = ingest(spark, catalog, round_no, rng)
            barrier = client.issue_barrier(snapshots)
            print(
                f"\n━━ round {round_no}/{rounds}: ingested {snapshots}, "
                f"barrier {barrier.barrier} sealed {dict(barrier.sealed)}"
            )
            for name, (_s, _d, transform, mode, cadence) in steps.items():
                if round_no % cadence and round_no != rounds:
                    print(f"   {name:<10} (runs every {cadence} rounds: not this one)")
                    continue
                results = jobs[name].run_pending(transform, mode=mode)
                done = [r for r in results if r.action == "process"]
                last = results[-1]
                print(
                    f"   {name:<10} processed {len(done)} barrier(s) {[r.barrier for r in done]}, then {last.action}"
                    + (f" (skipped {list(last.skipped)})" if last.skipped else ""),
                    flush=True,
                )
            print(run_spend(spend), flush=True)
            print_state(base_url)
            print("   " + check_invariant(spark, client, catalog))
        print(f"\n✔ demo finished in {time.monotonic() - started:.0f}s")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
