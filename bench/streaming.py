"""Streaming jobs: freshness of a three-job streaming chain, MetaService calls per micro-batch, and a streaming
job's cost against the same query writing plain parquet through foreachBatch.

Freshness: root → s1 → s2 → s3, three `StreamingJob` queries with processingTime 1 s in one `local[2]` Spark, on
Delta. Each sample appends a small batch to the root and reports the root's snapshot (the clock starts there),
then polls a strong read of the root and the leaf until the root's snapshot in it covers the report; p50 and
p99 over the samples (goal: p50 ≤ 5 s, p99 ≤ 10 s).

Calls: the server's own counters (`/metrics`): the `next` answers that handed a barrier out plus the commits,
divided by the micro-batches the three jobs ran (goal ≤ 2). A trigger that finds no barrier runs no micro-batch;
its `next` (answered wait or idle) is a poll, reported apart per job and second (one per trigger interval at
most).

Overhead: three barriers of N rows (1e6) each, one micro-batch per barrier, the same query three ways: copy each
barrier's new rows to a table. A stateless streaming job (`start_stateless`: the metaservice stream only plans,
Spark's parquet reader reads the barrier's files, a tagged Delta commit and the MetaService commit); a streaming job
whose rows flow through the metaservice stream (`start`, the path stateful queries take: Python readers hand the
rows to Spark); and Spark's own parquet stream source over the same files → `df.write.parquet` in foreachBatch
(`maxFilesPerTrigger` one barrier's files). All availableNow, a fresh table, sink and checkpoint per repetition,
the order turned each repetition. The goal (at most 1.15 times) is on the median micro-batch (Spark's own
`triggerExecution`: offsets, reading, writing, committing): what each barrier costs a running streaming job; both
paths' ratios are reported. The query's wall time, start to stop, is reported apart: starting a query (its Python
source worker included) is paid once per start, not per barrier.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from contextlib import ExitStack
from typing import Any

from bench.cluster import WORK_DIR
from bench.context import Context
from bench.report import Outcome
from bench.server import next_answers, served, serving
from bench.spark_overhead import spark_session

FRESH_P50, FRESH_P99, CALLS, OVERHEAD = 5.0, 10.0, 2.0, 1.15
BARRIERS = 3  # per overhead repetition


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(ctx: Context) -> Outcome:
    from pyspark.sql import functions as F

    from spark_client import DeltaCatalog, MetaServiceClient, NoConsistentVersion
    from spark_client.modes import Append
    from spark_client.streaming import StreamingJob
    from spark_client.streaming._catalogs import snapshot_files

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    samples = ctx.pick(30, 6)
    rows = ctx.pick(1_000_000, 100_000)
    repetitions = ctx.pick(3, 1)
    outcome = Outcome(
        "streaming",
        "streaming jobs: freshness of a 3-job chain (processingTime 1 s), calls per micro-batch, overhead vs plain "
        "parquet foreachBatch",
        {"samples": samples, "rows": rows, "repetitions": repetitions, "master": "local[2]", "format": "delta"},
    )
    lake = WORK_DIR / "streaming-lake"
    shutil.rmtree(lake, ignore_errors=True)
    url = ctx.cluster.fresh_database("bench_streaming")
    figures: dict[str, Any] = {}
    with ExitStack() as stack:
        server = stack.enter_context(serving(url))
        spark = stack.enter_context(spark_session())
        client = stack.enter_context(MetaServiceClient(server.base_url))
        catalog = DeltaCatalog(lake)

        # -- freshness and calls: a three-job chain ---------------------------------------------------------------
        root, chain = "bench.raw.events", ["bench.s.one", "bench.s.two", "bench.s.three"]

        def events(first: int, count: int = 50) -> Any:
            return spark.range(first, first + count).selectExpr("id", "id % 7 AS k", "CAST(id * 1.5 AS DOUBLE) AS v")

        catalog.append(spark, events(0), root)
        queries = []
        jobs = []
        source = root
        for n, sink in enumerate(chain):
            job = StreamingJob(
                spark,
                client,
                catalog,
                job_id=f"s{n + 1}",
                sources=[source],
                sinks=[sink],
                checkpoint=lake / "checkpoints" / sink,
                start="earliest",
            )
            job.register()
            if catalog.latest_snapshot(sink) is None:  # the next job's stream needs its input's schema
                query = job.start(job.read(source), mode=Append(), trigger={"availableNow": True})
                query.awaitTermination()
            jobs.append(job)
            source = sink
        for job, source in zip(jobs, [root, *chain[:-1]], strict=True):
            frame = job.read(source).withColumn("v", F.col("v") + 1)
            queries.append(job.start(frame, mode=Append(), trigger={"processingTime": "1 second"}))
        try:
            before, answers_before = served(server.base_url), next_answers(server.base_url)
            batches_before = [len(job.history) for job in jobs]
            chain_started = time.monotonic()
            lags: list[float] = []
            for sample in range(samples):
                snapshot = catalog.append(spark, events(1000 * (sample + 1)), root)
                started = time.monotonic()
                client.report_snapshot(root, snapshot)
                while True:
                    try:
                        read = client.versions([root, chain[-1]], "strong")
                        if read.versions[root] >= snapshot:
                            break
                    except NoConsistentVersion:
                        pass  # the leaf has no barrier yet
                    if time.monotonic() - started > 120:
                        raise RuntimeError(f"the leaf did not cover root snapshot {snapshot} within 120 s")
                    time.sleep(0.05)
                lags.append(time.monotonic() - started)
            after, answers_after = served(server.base_url), next_answers(server.base_url)
            chain_seconds = time.monotonic() - chain_started
            batches = sum(len(job.history) for job in jobs) - sum(batches_before)
        finally:
            for query in queries:
                query.stop()
        calls = {
            route: sum(
                count - before.get(key, 0)
                for key, count in after.items()
                if key[0] == "POST" and "/jobs/" in key[1] and key[1].endswith(route)
            )
            for route in ("/next", "/commit")
        }
        answers = {a: answers_after.get(a, 0) - answers_before.get(a, 0) for a in ("process", "wait", "idle")}
        p50, p99 = statistics.median(lags), _percentile(lags, 0.99)
        # A micro-batch is a trigger that found a barrier: its `next` answered process, its sink committed. A
        # trigger that finds none runs no micro-batch; its `next` (wait or idle) is a poll, counted apart.
        in_batches = answers["process"] + calls["/commit"]
        calls_per_batch = in_batches / max(1, batches)
        polls = answers["wait"] + answers["idle"]
        polls_per_job_second = polls / (len(jobs) * chain_seconds)
        figures["freshness_seconds"] = {"p50": p50, "p99": p99, "samples": [round(x, 3) for x in lags]}
        figures["calls_per_micro_batch"] = calls_per_batch
        figures["micro_batches"] = batches
        figures["calls"] = {"next": calls["/next"], "commit": calls["/commit"], "next_answers": answers}
        figures["idle_polls_per_job_second"] = polls_per_job_second
        outcome.row(
            "freshness p50, 3-job chain, processingTime 1 s", f"{p50:.2f} s", goal="≤ 5 s", passed=p50 <= FRESH_P50
        )
        outcome.row(
            "freshness p99, 3-job chain, processingTime 1 s", f"{p99:.2f} s", goal="≤ 10 s", passed=p99 <= FRESH_P99
        )
        outcome.row(
            "MetaService calls per micro-batch (next answered process + commit)",
            f"{calls_per_batch:.2f}",
            baseline=f"{batches} micro-batches, {in_batches} calls",
            goal="≤ 2",
            passed=calls_per_batch <= CALLS,
        )
        outcome.row(
            "polls between micro-batches (next answered wait or idle), per job and second",
            f"{polls_per_job_second:.2f}",
            baseline=f"{polls} polls, 3 jobs, {chain_seconds:.0f} s, trigger every 1 s",
        )

        # -- overhead: barriers of `rows` rows ---------------------------------------------------------------------
        # The same query three ways: copy each barrier's new rows to a table. `files`: a stateless streaming job
        # (start_stateless: the barrier's files read by Spark's parquet reader, a tagged Delta commit); `rows`:
        # a streaming job whose rows flow through the metaservice stream (start: the path of stateful queries);
        # `plain`: Spark's parquet stream source, df.write.parquet in foreachBatch. The order turns each repetition.
        paths = ("files", "rows", "plain")
        batch_s: dict[str, list[float]] = {p: [] for p in paths}
        query_s: dict[str, list[float]] = {p: [] for p in paths}
        phase_ms: dict[str, list[dict[str, int]]] = {p: [] for p in paths}
        for r in range(repetitions + 1):  # the first is a warm-up
            big = f"bench.raw.big{r}"
            big_jobs = {
                path: StreamingJob(
                    spark,
                    client,
                    catalog,
                    job_id=f"big_{path}{r}",
                    sources=[big],
                    sinks=[f"bench.mart.big_{path}{r}"],
                    checkpoint=lake / "checkpoints" / f"big_{path}{r}",
                    start="earliest",
                )
                for path in ("files", "rows")
            }
            files_per_barrier, files = set(), 0
            for n in range(BARRIERS):  # each batch of rows sealed by its own barrier
                snapshot = catalog.append(
                    spark, spark.range(n * rows, (n + 1) * rows).selectExpr("id", "id % 97 AS k", "id * 1.5 AS v"), big
                )
                if n == 0:
                    for job in big_jobs.values():
                        job.register()  # its source exists now
                client.issue_barrier({big: snapshot})
                total = len(snapshot_files(catalog, big, snapshot))
                files_per_barrier.add(total - files)
                files = total
            schema = catalog.read_at(spark, big, 0).schema
            out = str(lake / "plain" / str(r))

            def write(df: Any, batch_id: int, out: str = out) -> None:
                del batch_id
                df.write.mode("append").parquet(out)

            def copy(inputs: Any, big: str = big, sink: str = f"bench.mart.big_files{r}") -> dict[str, Any]:
                return {sink: inputs.changes(big)}

            order = paths[r % 3 :] + paths[: r % 3]
            progress: dict[str, list[dict[str, Any]]] = {}
            for path in order:
                t0 = time.monotonic()
                if path == "files":
                    query = big_jobs[path].start_stateless(copy, mode=Append(), trigger={"availableNow": True})
                elif path == "rows":
                    query = big_jobs[path].start(
                        big_jobs[path].read(big), mode=Append(), trigger={"availableNow": True}
                    )
                else:
                    query = (
                        spark.readStream.schema(schema)
                        .option("maxFilesPerTrigger", max(files_per_barrier))  # one barrier's files per micro-batch
                        .parquet(f"{catalog.location(big)}/data/*/*.parquet")  # the Delta table's files, its log aside
                        .writeStream.foreachBatch(write)
                        .option("checkpointLocation", str(lake / "checkpoints" / f"plain{r}"))
                        .trigger(availableNow=True)
                        .start()
                    )
                query.awaitTermination()
                whole = time.monotonic() - t0
                if path == "plain":
                    progress[path] = [p for p in query.recentProgress if p["numInputRows"]]
                else:  # by batch id: a stateless job's micro-batches read no row through the stream
                    done = {h.batch_id for h in big_jobs[path].history if h.action == "process"}
                    progress[path] = [p for p in query.recentProgress if p["batchId"] in done]
                if r:
                    batch_s[path] += [p["durationMs"]["triggerExecution"] / 1000 for p in progress[path]]
                    phase_ms[path] += [dict(p["durationMs"]) for p in progress[path]]
                    query_s[path].append(whole)
            # every path must have moved every row, one barrier per micro-batch, or the ratio compares nothing
            moved = {
                path: catalog.read_at(spark, job.sinks[0], latest).count()
                if (latest := catalog.latest_snapshot(job.sinks[0])) is not None
                else 0
                for path, job in big_jobs.items()
            }
            moved["plain"] = spark.read.parquet(out).count() if os.path.isdir(out) else 0
            moved.update({f"{path}_batches": len(progress[path]) for path in paths})
            expected = dict.fromkeys(paths, BARRIERS * rows) | {f"{path}_batches": BARRIERS for path in paths}
            if moved != expected:
                raise RuntimeError(f"repetition {r}: {moved}, expected {expected}")
        median = {path: statistics.median(batch_s[path]) for path in paths}
        query_median = {path: statistics.median(query_s[path]) for path in paths}
        ratio = {path: median[path] / median["plain"] for path in ("files", "rows")}
        query_ratio = {path: query_median[path] / query_median["plain"] for path in ("files", "rows")}
        figures["overhead"] = {
            "micro_batch_seconds": {**batch_s, "ratio_files": ratio["files"], "ratio_rows": ratio["rows"]},
            "query_seconds": {**query_s, "ratio_files": query_ratio["files"], "ratio_rows": query_ratio["rows"]},
            "phase_ms_medians": {
                path: {
                    key: statistics.median(p.get(key, 0) for p in phase_ms[path]) for key in sorted(phase_ms[path][0])
                }
                for path in paths
            },
        }
        outcome.row(
            f"stateless streaming job (start_stateless: Spark's parquet reader), a micro-batch of {rows:,} rows",
            f"{median['files']:.2f} s",
            baseline=f"{median['plain']:.2f} s plain parquet foreachBatch, same copy",
            ratio=ratio["files"],
            goal="≤ 1.15x",
            passed=ratio["files"] <= OVERHEAD,
        )
        outcome.row(
            f"streaming job, rows through the stream (start: stateful queries' path), a micro-batch of {rows:,} rows",
            f"{median['rows']:.2f} s",
            baseline=f"{median['plain']:.2f} s plain parquet foreachBatch, same copy",
            ratio=ratio["rows"],
            goal="≤ 1.15x",
            passed=ratio["rows"] <= OVERHEAD,
        )
        for path, label in (("files", "stateless streaming job"), ("rows", "streaming job, rows through the stream")):
            outcome.row(
                f"{label}, a query started for {BARRIERS} such barriers (availableNow, start to stop)",
                f"{query_median[path]:.2f} s",
                baseline=f"{query_median['plain']:.2f} s plain parquet foreachBatch",
                ratio=query_ratio[path],
            )
    outcome.figures = figures
    return outcome
