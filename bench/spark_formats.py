"""Issue 16: each table format's barrier-tagged append against a plain Spark parquet write of the same rows.

Per format (Delta, Iceberg on its SQLite catalog, Paimon) and size (1e5 and 1e6 rows): one root table of that
format; each repetition runs a fresh job (its own sink) reading the root at the barrier's snapshot and writing
it unchanged in **append** mode: `next` over HTTP, the input at the snapshot, the format's write (Spark's
parquet writer + the driver's commit for Delta and Iceberg; executors writing through pypaimon + the driver's
commit for Paimon), `commit` over HTTP. The baseline is `df.write.parquet` of the same DataFrame (the root's
files at that snapshot) into a fresh directory. Both are warmed up once, then alternate; medians are compared.
`local[2]`, UI off. The time inside `catalog.write` is reported separately (where the overhead lives).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, cast
from unittest.mock import patch

from bench.cluster import WORK_DIR
from bench.context import Context
from bench.report import Outcome
from bench.server import serving
from bench.spark_overhead import Stopwatch, spark_session

if TYPE_CHECKING:
    from spark_client import Catalog

GOAL = 1.10
FORMATS = ("delta", "iceberg", "paimon")


def make_catalog(table_format: str, root: str) -> Catalog:
    from spark_client import DeltaCatalog, IcebergCatalog, PaimonCatalog

    if table_format == "iceberg":
        return IcebergCatalog(root)
    if table_format == "paimon":
        return PaimonCatalog(root)
    return cast("Catalog", DeltaCatalog(root))  # a Catalog structurally (typed as one for this factory)


def run(ctx: Context) -> Outcome:
    from spark_client import EtlJob, MetaServiceClient

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Paimon's executor-side writes need pypaimon
    sizes = ctx.pick((100_000, 1_000_000), (10_000, 100_000))
    repetitions = ctx.pick(5, 2)
    outcome = Outcome(
        "spark_formats",
        "barrier-tagged EtlJob.run_once (append) per table format vs plain Spark parquet write (issue 16)",
        {
            "rows": sizes,
            "repetitions": repetitions,
            "formats": FORMATS,
            "master": "local[2]",
            "mode": "append",
            "statistic": "median",
        },
    )
    lake = WORK_DIR / "spark-formats"
    shutil.rmtree(lake, ignore_errors=True)
    url = ctx.cluster.fresh_database("bench_spark_formats")
    figures: dict[str, Any] = {}
    with ExitStack() as stack:
        server = stack.enter_context(serving(url))
        spark = stack.enter_context(spark_session())
        client = stack.enter_context(MetaServiceClient(server.base_url))
        for table_format in FORMATS:
            catalog = make_catalog(table_format, str(lake / table_format))
            watch = Stopwatch()
            with patch.object(catalog, "write", watch.wrap("catalog.write", catalog.write)):
                figures[table_format] = _measure(
                    spark, client, catalog, EtlJob, watch, sizes, repetitions, outcome, lake, table_format
                )
    outcome.figures = figures
    outcome.notes.append(
        "Paimon's files are written by pypaimon inside Spark tasks (mapInArrow): rows cross from the JVM to "
        "Python as Arrow batches and are encoded by pyarrow's parquet writer, not Spark's."
    )
    shutil.rmtree(lake, ignore_errors=True)
    return outcome


def _measure(
    spark: Any,
    client: Any,
    catalog: Catalog,
    job_class: Any,
    watch: Stopwatch,
    sizes: tuple[int, ...],
    repetitions: int,
    outcome: Outcome,
    lake: Any,
    table_format: str,
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for rows in sizes:
        root = f"bench.raw.{table_format}{rows}"
        data = spark.range(rows).selectExpr(
            "id", "id * 1.5 AS value", "concat('name-', id) AS name", "id % 97 AS bucket"
        )
        snapshot = catalog.append(spark, data, root)
        source = catalog.read_at(spark, root, snapshot)

        def plain(tag: str, rows: int = rows, source: Any = source) -> float:
            t0 = time.perf_counter()
            source.write.mode("error").parquet(str(lake / "plain" / f"{table_format}-rows{rows}-{tag}"))
            return time.perf_counter() - t0

        def tagged(tag: str, rows: int = rows, root: str = root) -> tuple[float, float]:
            sink = f"bench.mart.{table_format}{rows}_{tag}"
            job = job_class(spark, client, catalog, job_id=f"{table_format}-{rows}-{tag}", sources=[root], sinks=[sink])
            job.register()
            before = watch.seconds.get("catalog.write", 0.0)
            t0 = time.perf_counter()
            result = job.run_once(lambda inputs: {sink: inputs[root]}, mode="append")
            elapsed = time.perf_counter() - t0
            assert result.action == "process", result
            assert catalog.read_at(spark, sink, result.snapshots[sink]).count() == rows
            return elapsed, watch.seconds["catalog.write"] - before

        plain("warmup")
        tagged("warmup")
        plain_s, tagged_s, write_s = [], [], []
        for r in range(repetitions):
            plain_s.append(plain(f"r{r}"))
            total, inside = tagged(f"r{r}")
            tagged_s.append(total)
            write_s.append(inside)
        ratio = statistics.median(tagged_s) / statistics.median(plain_s)
        figures[str(rows)] = {
            "plain_seconds": [round(x, 3) for x in plain_s],
            "tagged_seconds": [round(x, 3) for x in tagged_s],
            "catalog_write_seconds": [round(x, 3) for x in write_s],
            "plain_median": round(statistics.median(plain_s), 3),
            "tagged_median": round(statistics.median(tagged_s), 3),
            "ratio": round(ratio, 3),
        }
        is_goal_size = rows == max(sizes)
        outcome.row(
            f"{table_format} append run_once / plain write, {rows:,} rows",
            f"{statistics.median(tagged_s):.2f} s",
            f"{statistics.median(plain_s):.2f} s",
            ratio,
            f"≤ {GOAL:.2f}" if is_goal_size else "",
            ratio <= GOAL if is_goal_size else None,
        )
    return figures
