"""Issue 16, inside `spark_overhead`: each table format's barrier-tagged append against a plain Spark parquet write
of the same rows.

Per format (Delta, Iceberg on its SQLite catalog, Paimon) and size (1e5 and 1e6 rows): one root table of that
format holding a first batch. For each repetition a job of its own (its own sink) first copies the root (untimed,
so the job is in its steady state: registered, roots known, sink existing), then the root gets a second batch of
the same size and the timed `run_once` processes that barrier in **append** mode: `next` over HTTP, the new rows
read with `inputs.changes`, the format's write (Spark's parquet writer + the driver's commit, for every format),
`commit` over HTTP. The baseline is `df.write.parquet` of the same new rows (the root's files added by the second
batch) into a fresh directory. Both are warmed up once, then alternate; medians are compared. The time inside
`catalog.write` is reported separately (where the overhead lives).

Paimon tables that Spark's writer cannot write alike (partitioned, fixed buckets, value statistics, …) are written
by pypaimon inside Spark tasks instead, which is how every Paimon table was written before. That path is measured
in the same run: an untagged append of the same rows with the Spark path switched off.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from unittest.mock import patch

from bench.report import Outcome
from bench.spark_overhead import GOAL, Stopwatch, copy

if TYPE_CHECKING:
    from spark_client import Catalog

FORMATS = ("delta", "iceberg", "paimon")
EXECUTOR_WRITERS = ("paimon",)  # formats with a second path: executors write through a Python library


def make_catalog(table_format: str, root: str) -> Catalog:
    from spark_client import DeltaCatalog, IcebergCatalog, PaimonCatalog

    if table_format == "iceberg":
        return IcebergCatalog(root)
    if table_format == "paimon":
        return PaimonCatalog(root)
    return cast("Catalog", DeltaCatalog(root))  # a Catalog structurally (typed as one for this factory)


def measure(
    spark: Any, client: Any, lake: Path, outcome: Outcome, *, sizes: tuple[int, ...], repetitions: int
) -> dict[str, Any]:
    """Rows for every format and size into `outcome`; the figures by format and size."""
    figures: dict[str, Any] = {}
    for table_format in FORMATS:
        catalog = make_catalog(table_format, str(lake / table_format))
        watch = Stopwatch()
        with patch.object(catalog, "write", watch.wrap("catalog.write", catalog.write)):
            figures[table_format] = {
                str(rows): _one_size(spark, client, catalog, watch, rows, repetitions, lake, table_format)
                for rows in sizes
            }
            for rows in sizes:
                ratio = figures[table_format][str(rows)]["ratio"]
                is_goal_size = rows == max(sizes)
                outcome.row(
                    f"{table_format} append run_once / plain write, {rows:,} new rows",
                    f"{figures[table_format][str(rows)]['tagged_median']:.2f} s",
                    f"{figures[table_format][str(rows)]['plain_median']:.2f} s",
                    ratio,
                    f"≤ {GOAL:.2f}" if is_goal_size else "",
                    ratio <= GOAL if is_goal_size else None,
                )
                outcome.row(
                    f"{table_format} append run_once / the format's own untagged append, {rows:,} new rows",
                    f"{figures[table_format][str(rows)]['tagged_median']:.2f} s",
                    f"{figures[table_format][str(rows)]['untagged_append_median']:.2f} s",
                    figures[table_format][str(rows)]["ratio_to_untagged_append"],
                )
                size = figures[table_format][str(rows)]
                if "executor_append_median" in size:
                    outcome.row(
                        f"{table_format} untagged append by pypaimon in Spark tasks / plain write, {rows:,} new rows",
                        f"{size['executor_append_median']:.2f} s",
                        f"{size['plain_median']:.2f} s",
                        size["executor_append_ratio"],
                    )
    return figures


def _one_size(
    spark: Any,
    client: Any,
    catalog: Catalog,
    watch: Stopwatch,
    rows: int,
    repetitions: int,
    lake: Path,
    table_format: str,
) -> dict[str, Any]:
    from spark_client import EtlJob

    root = f"bench.raw.{table_format}{rows}"

    def batch(number: int) -> Any:
        return spark.range(rows).selectExpr(
            f"id + {(number - 1) * rows} AS id", "id * 1.5 AS value", "concat('name-', id) AS name", "id % 97 AS bucket"
        )

    first = catalog.append(spark, batch(1), root)
    jobs = []
    for r in range(repetitions + 1):  # one warm-up job
        sink = f"bench.mart.{table_format}{rows}_{r}"
        job = EtlJob(spark, client, catalog, job_id=f"{table_format}-{rows}-{r}", sources=[root], sinks=[sink])
        job.register()
        seeded = job.run_once(copy(root, sink), mode="append")
        assert seeded.action == "process", seeded
        jobs.append((job, sink))
    second = catalog.append(spark, batch(2), root)
    new_rows = catalog.read_changes(spark, root, after_snapshot_id=first, snapshot_id=second)

    def plain(tag: str) -> float:
        t0 = time.perf_counter()
        new_rows.write.mode("error").parquet(str(lake / "plain" / f"{table_format}-rows{rows}-{tag}"))
        return time.perf_counter() - t0

    untagged_table = f"bench.plain.{table_format}{rows}"

    def untagged() -> float:
        """The format's own append of the same rows, without MetaService (no job, no barrier, no tags)."""
        t0 = time.perf_counter()
        catalog.append(spark, new_rows, untagged_table)
        return time.perf_counter() - t0

    def tagged(r: int) -> tuple[float, float]:
        job, sink = jobs[r]
        before = watch.seconds.get("catalog.write", 0.0)
        t0 = time.perf_counter()
        result = job.run_once(lambda inputs: {sink: inputs.changes(root)}, mode="append")
        elapsed = time.perf_counter() - t0
        assert result.action == "process", result
        assert catalog.read_at(spark, sink, result.snapshots[sink]).count() == 2 * rows
        return elapsed, watch.seconds["catalog.write"] - before

    def executor_append() -> float:
        """Paimon's other path: pypaimon writes the rows inside Spark tasks (mapInArrow), the driver commits."""
        from spark_client.catalog import paimon

        t0 = time.perf_counter()
        with patch.object(paimon, "_spark_codec", lambda _native: None):
            catalog.append(spark, new_rows, untagged_table)
        return time.perf_counter() - t0

    with_executors = table_format in EXECUTOR_WRITERS
    plain("warmup")
    untagged()  # creates the table: the timed appends find it, as the tagged runs find their sinks
    tagged(repetitions)
    if with_executors:
        executor_append()
    plain_s, tagged_s, write_s, untagged_s, executor_s = [], [], [], [], []
    for r in range(repetitions):
        plain_s.append(plain(f"r{r}"))
        total, inside = tagged(r)
        tagged_s.append(total)
        write_s.append(inside)
        untagged_s.append(untagged())
        if with_executors:
            executor_s.append(executor_append())
    executors: dict[str, Any] = {}
    if executor_s:
        executors = {
            "executor_append_seconds": [round(x, 3) for x in executor_s],
            "executor_append_median": round(statistics.median(executor_s), 3),
            "executor_append_ratio": round(statistics.median(executor_s) / statistics.median(plain_s), 3),
        }
    return executors | {
        "untagged_append_seconds": [round(x, 3) for x in untagged_s],
        "untagged_append_median": round(statistics.median(untagged_s), 3),
        "ratio_to_untagged_append": round(statistics.median(tagged_s) / statistics.median(untagged_s), 3),
        "plain_seconds": [round(x, 3) for x in plain_s],
        "tagged_seconds": [round(x, 3) for x in tagged_s],
        "catalog_write_seconds": [round(x, 3) for x in write_s],
        "plain_median": round(statistics.median(plain_s), 3),
        "tagged_median": round(statistics.median(tagged_s), 3),
        "ratio": round(statistics.median(tagged_s) / statistics.median(plain_s), 3),
    }
