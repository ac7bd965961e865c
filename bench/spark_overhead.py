"""Issues 3, 15 and 16: a barrier-tagged `EtlJob.run_once` in each write mode, and in append mode for each table
format (bench/spark_formats.py), against a plain Spark parquet write of the same DataFrame.

One root Delta table per size (1e5 and 1e6 rows). For each write mode and repetition a fresh job (its own sink)
first copies the root into its sink (untimed), then the root gets a second batch of the same size, and the
timed `run_once` processes that barrier: `next` over HTTP, the new rows read with `inputs.changes` (Overwrite,
which refuses incremental reads: the whole root filtered to the new batch), the mode
applied (Append adds them; Overwrite replaces the table with them; ReplaceWhere replaces the new batch's rows;
OverwritePartitions recomputes every `bucket` partition the batch touches — all 97, so it rewrites the table;
Merge upserts on `id`), the Delta log commit with the app transaction, `commit` over HTTP. The baseline is
`df.write.parquet` of the same new rows into a fresh directory, alternating with the timed runs; medians are
compared. `local[2]`, UI off. The 1.10 goal of issue 3 applies to Append (same work as the plain write); the
other modes read and rewrite table files by design, and their ratio says how much that costs.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
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


def copy(source: str, sink: str) -> Callable[[Any], Mapping[str, Any]]:
    """A transform writing the whole source into the sink."""

    def transform(inputs: Any) -> Mapping[str, Any]:
        return {sink: inputs[source]}

    return transform


def new_rows_of(source: str, sink: str, *, whole: bool) -> Callable[[Any], Mapping[str, Any]]:
    """The new batch: `inputs.changes`, or (for Overwrite, which refuses incremental reads) the whole source
    filtered to it."""

    def transform(inputs: Any) -> Mapping[str, Any]:
        return {sink: inputs[source].filter("batch = 2") if whole else inputs.changes(source)}

    return transform


def modes() -> dict[str, Any]:
    """Mode name → the mode the timed barrier uses (the new batch is `batch = 2`)."""
    from spark_client.modes import Append, Merge, Overwrite, OverwritePartitions, ReplaceWhere

    return {
        "append": Append(),
        "overwrite": Overwrite(),
        "replace_where": ReplaceWhere("batch = 2"),
        "overwrite_partitions": OverwritePartitions(columns=("bucket",)),
        "merge": Merge(keys=("id",)),
    }


def run(ctx: Context) -> Outcome:
    from bench import spark_formats
    from spark_client import DeltaCatalog, EtlJob, MetaServiceClient
    from spark_client.modes import Append

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Paimon's executor-side writes need pypaimon

    sizes = ctx.pick((100_000, 1_000_000), (10_000, 100_000))
    repetitions = ctx.pick(3, 2)
    format_repetitions = ctx.pick(7, 2)
    by_mode = modes()
    outcome = Outcome(
        "spark_overhead",
        "barrier-tagged EtlJob.run_once in each write mode and table format vs plain Spark parquet write "
        "(issues 3, 15, 16)",
        {
            "rows": sizes,
            "repetitions": repetitions,
            "format_repetitions": format_repetitions,
            "master": "local[2]",
            "modes": list(by_mode),
            "formats": spark_formats.FORMATS,
            "statistic": "median",
        },
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
            (catalog, "commits_after", "baseline check (commits_after)"),
            (catalog, "write", "catalog.write (mode plan + parquet write + Delta log commit)"),
            (DataFrameWriter, "parquet", "spark parquet write"),
        ):
            stack.enter_context(patch.object(target, name, watch.wrap(label, getattr(target, name))))
        for rows in sizes:
            root = f"bench.raw.rows{rows}"

            def batch(number: int, rows: int = rows) -> Any:
                return spark.range(rows).selectExpr(
                    f"id + {(number - 1) * rows} AS id",
                    f"CAST({number} AS BIGINT) AS batch",
                    "id * 1.5 AS value",
                    "concat('name-', id) AS name",
                    "id % 97 AS bucket",
                )

            first = catalog.append(spark, batch(1), root)
            jobs: dict[tuple[str, int], tuple[EtlJob, str]] = {}
            for mode_name in by_mode:
                for r in range(repetitions + 1):  # one warm-up job per mode
                    sink = f"bench.mart.rows{rows}_{mode_name}_{r}"
                    job = EtlJob(spark, client, catalog, job_id=f"{mode_name}-{rows}-{r}", sources=[root], sinks=[sink])
                    job.register()
                    seeded = job.run_once(copy(root, sink), mode=Append())
                    assert seeded.action == "process", seeded
                    jobs[(mode_name, r)] = (job, sink)
            second = catalog.append(spark, batch(2), root)
            new_rows = catalog.read_changes(spark, root, after_snapshot_id=first, snapshot_id=second)

            def plain(tag: str, rows: int = rows, new_rows: Any = new_rows) -> float:
                t0 = time.perf_counter()
                new_rows.write.mode("error").parquet(str(lake / "plain" / f"rows{rows}-{tag}"))
                return time.perf_counter() - t0

            def tagged(
                mode_name: str,
                r: int,
                breakdown: dict[str, float],
                root: str = root,
                jobs: dict[tuple[str, int], tuple[EtlJob, str]] = jobs,
            ) -> float:
                job, sink = jobs[(mode_name, r)]
                before = dict(watch.seconds)
                t0 = time.perf_counter()
                result = job.run_once(new_rows_of(root, sink, whole=mode_name == "overwrite"), mode=by_mode[mode_name])
                elapsed = time.perf_counter() - t0
                assert result.action == "process", result
                for label, total in watch.seconds.items():
                    breakdown[label] = breakdown.get(label, 0.0) + total - before.get(label, 0.0)
                return elapsed

            size_figures: dict[str, Any] = {}
            plain("warmup")
            for mode_name in by_mode:
                tagged(mode_name, repetitions, {})  # warm-up
                breakdown: dict[str, float] = {}
                plain_s, tagged_s = [], []
                for r in range(repetitions):
                    plain_s.append(plain(f"{mode_name}-r{r}"))
                    tagged_s.append(tagged(mode_name, r, breakdown))
                ratio = statistics.median(tagged_s) / statistics.median(plain_s)
                size_figures[mode_name] = {
                    "plain_seconds": [round(x, 3) for x in plain_s],
                    "tagged_seconds": [round(x, 3) for x in tagged_s],
                    "plain_median": round(statistics.median(plain_s), 3),
                    "tagged_median": round(statistics.median(tagged_s), 3),
                    "ratio": round(ratio, 3),
                    "tagged_breakdown_seconds_per_run": {k: round(v / repetitions, 3) for k, v in breakdown.items()},
                }
                outcome.row(
                    f"run_once {mode_name} / plain write, {rows:,} new rows",
                    f"{statistics.median(tagged_s):.2f} s",
                    f"{statistics.median(plain_s):.2f} s",
                    ratio,
                    "",  # the append goal is carried by the formats rows (7 repetitions, not 3)
                    None,
                )
            figures[str(rows)] = size_figures
        figures["formats"] = spark_formats.measure(
            spark, client, lake / "formats", outcome, sizes=sizes, repetitions=format_repetitions
        )
    outcome.notes.append(
        "Every format's files are written by Spark's parquet writer; the driver commits them. The Paimon row "
        "'untagged append by pypaimon in Spark tasks' is the path for Paimon tables Spark cannot write alike "
        "(partitioned, fixed buckets, value statistics): rows cross from the JVM to Python as Arrow batches."
    )
    outcome.figures = figures
    shutil.rmtree(lake, ignore_errors=True)
    return outcome
