"""Issue 3: a barrier-tagged `EtlJob.run_once` against a plain Spark parquet write of the same DataFrame.

One root Delta table per size (1e5 and 1e6 rows). Each repetition runs a fresh job (its own sink) reading the
root and writing it unchanged in overwrite mode: `next` over HTTP, the input at the barrier's snapshot,
Spark's parquet writer, the Delta log commit with the app transaction, `commit` over HTTP. The baseline is
`df.write.parquet` of the same DataFrame (the root's files at that version) into a fresh directory. Both are
warmed up once, then alternate; medians are compared. `local[2]`, UI off.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

from bench.cluster import WORK_DIR
from bench.context import Context
from bench.report import Outcome
from bench.server import serving

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

GOAL = 1.10


@contextmanager
def spark_session() -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("metaservice-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


class Stopwatch:
    """Wraps callables to add up the time spent in each, by label (where a tagged run's time goes)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - t0

        return timed


def run(ctx: Context) -> Outcome:
    from spark_client import DeltaCatalog, EtlJob, MetaServiceClient

    sizes = ctx.pick((100_000, 1_000_000), (10_000, 100_000))
    repetitions = ctx.pick(5, 2)
    outcome = Outcome(
        "spark_overhead",
        "barrier-tagged EtlJob.run_once vs plain Spark parquet write (issue 3)",
        {"rows": sizes, "repetitions": repetitions, "master": "local[2]", "mode": "overwrite", "statistic": "median"},
    )
    lake = WORK_DIR / "spark-lake"
    shutil.rmtree(lake, ignore_errors=True)
    url = ctx.cluster.fresh_database("bench_spark")
    figures: dict[str, Any] = {}
    with ExitStack() as stack:
        server = stack.enter_context(serving(url))
        spark = stack.enter_context(spark_session())
        client = stack.enter_context(MetaServiceClient(server.base_url))
        catalog = DeltaCatalog(lake)
        watch = Stopwatch()
        from pyspark.sql.readwriter import DataFrameWriter

        for target, name, label in (
            (client, "next_barrier", "http next"),
            (client, "commit_barrier", "http commit"),
            (catalog, "write", "catalog.write (parquet write + Delta log commit)"),
            (DataFrameWriter, "parquet", "spark parquet write"),
        ):
            stack.enter_context(patch.object(target, name, watch.wrap(label, getattr(target, name))))
        for rows in sizes:
            root = f"bench.raw.rows{rows}"
            data = spark.range(rows).selectExpr(
                "id", "id * 1.5 AS value", "concat('name-', id) AS name", "id % 97 AS bucket"
            )
            version = catalog.append(spark, data, root)
            source = catalog.read_at(spark, root, version)

            def plain(tag: str, rows: int = rows, source: Any = source) -> float:
                t0 = time.perf_counter()
                source.write.mode("error").parquet(str(lake / "plain" / f"rows{rows}-{tag}"))
                return time.perf_counter() - t0

            breakdown: dict[str, float] = {}

            def tagged(tag: str, rows: int = rows, root: str = root, breakdown: dict[str, float] = breakdown) -> float:
                sink = f"bench.mart.rows{rows}_{tag}"
                job = EtlJob(spark, client, catalog, job_id=f"copy-{rows}-{tag}", sources=[root], sinks=[sink])
                job.register()
                before = dict(watch.seconds)
                t0 = time.perf_counter()
                result = job.run_once(lambda inputs: {sink: inputs[root]}, mode="overwrite")
                elapsed = time.perf_counter() - t0
                assert result.action == "process", result
                for label, total in watch.seconds.items():
                    breakdown[label] = breakdown.get(label, 0.0) + total - before.get(label, 0.0)
                return elapsed

            plain("warmup")
            tagged("warmup")
            breakdown.clear()
            plain_s, tagged_s = [], []
            for r in range(repetitions):
                plain_s.append(plain(f"r{r}"))
                tagged_s.append(tagged(f"r{r}"))
            ratio = statistics.median(tagged_s) / statistics.median(plain_s)
            figures[str(rows)] = {
                "plain_seconds": [round(x, 3) for x in plain_s],
                "tagged_seconds": [round(x, 3) for x in tagged_s],
                "plain_median": round(statistics.median(plain_s), 3),
                "tagged_median": round(statistics.median(tagged_s), 3),
                "ratio": round(ratio, 3),
                "tagged_breakdown_seconds_per_run": {k: round(v / repetitions, 3) for k, v in breakdown.items()},
            }
            is_goal_size = rows == max(sizes)
            outcome.row(
                f"run_once / plain write, {rows:,} rows",
                f"{statistics.median(tagged_s):.2f} s",
                f"{statistics.median(plain_s):.2f} s",
                ratio,
                f"≤ {GOAL:.2f}" if is_goal_size else "",
                ratio <= GOAL if is_goal_size else None,
            )
    outcome.figures = figures
    shutil.rmtree(lake, ignore_errors=True)
    return outcome
