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

Overhead: three barriers of N rows (1e6) each through a streaming job (metaservice source → Append to Delta,
tagged and committed; one micro-batch per barrier), against Spark's own parquet stream source over the same files
→ `df.write.parquet` in foreachBatch (`maxFilesPerTrigger` one barrier's files, so one micro-batch per barrier too);
both availableNow, a fresh table, sink and checkpoint per repetition, alternating. The goal (at most 1.15 times)
is on the median micro-batch (Spark's own `triggerExecution`: offsets, reading, writing, committing): what each
barrier costs a running streaming job. The query's wall time, start to stop, is reported apart: starting a
query (its Python source worker included) is paid once per start, not per barrier. A third query splits the
difference: Spark's parquet source again, each micro-batch written by the catalog as a tagged Delta commit (the
streaming job's write path without its source).
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

        # -- overhead: barriers of `rows` rows -------------------------------------------------------------------
        ours, plain, ours_query, plain_query, split = [], [], [], [], []
        for r in range(repetitions + 1):  # the first is a warm-up
            big, sink, out = f"bench.raw.big{r}", f"bench.mart.big{r}", str(lake / "plain" / str(r))
            job = StreamingJob(
                spark,
                client,
                catalog,
                job_id=f"big{r}",
                sources=[big],
                sinks=[sink],
                checkpoint=lake / "checkpoints" / f"big{r}",
                start="earliest",
            )
            files_per_barrier, files = set(), 0
            for n in range(BARRIERS):  # each batch of rows sealed by its own barrier
                snapshot = catalog.append(
                    spark, spark.range(n * rows, (n + 1) * rows).selectExpr("id", "id % 97 AS k", "id * 1.5 AS v"), big
                )
                if n == 0:
                    job.register()  # its source exists now
                client.issue_barrier({big: snapshot})
                total = len(snapshot_files(catalog, big, snapshot))
                files_per_barrier.add(total - files)
                files = total
            t0 = time.monotonic()
            query = job.start(job.read(big), mode=Append(), trigger={"availableNow": True})
            query.awaitTermination()
            whole = time.monotonic() - t0
            batch_ms = [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]]

            def write(df: Any, batch_id: int, out: str = out) -> None:
                del batch_id
                df.write.mode("append").parquet(out)

            t0 = time.monotonic()
            query = (
                spark.readStream.schema(catalog.read_at(spark, big, 0).schema)
                .option("maxFilesPerTrigger", max(files_per_barrier))  # one barrier's files per micro-batch
                .parquet(f"{catalog.location(big)}/data/*/*.parquet")  # the Delta table's files, its log aside
                .writeStream.foreachBatch(write)
                .option("checkpointLocation", str(lake / "checkpoints" / f"plain{r}"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            plain_whole = time.monotonic() - t0
            plain_ms = [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]]

            # where the difference lies: Spark's parquet source again, written by our catalog, tagged
            def tagged(df: Any, batch_id: int, sink: str = f"bench.mart.native{r}", app: str = f"native{r}") -> None:
                catalog.write(spark, df, sink, mode=Append(), app_id=app, barrier=batch_id + 1)

            query = (
                spark.readStream.schema(catalog.read_at(spark, big, 0).schema)
                .option("maxFilesPerTrigger", max(files_per_barrier))
                .parquet(f"{catalog.location(big)}/data/*/*.parquet")
                .writeStream.foreachBatch(tagged)
                .option("checkpointLocation", str(lake / "checkpoints" / f"native{r}"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            split_ms = [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]]
            # both must have moved every row, one barrier per micro-batch, or the ratio compares nothing
            latest = catalog.latest_snapshot(sink)
            written = {
                "ours": catalog.read_at(spark, sink, latest).count() if latest is not None else 0,
                "plain": spark.read.parquet(out).count() if os.path.isdir(out) else 0,
                "ours_batches": len(batch_ms),
                "plain_batches": len(plain_ms),
                "native_batches": len(split_ms),
            }
            expected = {"ours": BARRIERS * rows, "plain": BARRIERS * rows, "ours_batches": BARRIERS}
            expected["plain_batches"] = expected["native_batches"] = BARRIERS
            if written != expected:
                raise RuntimeError(f"repetition {r}: {written}, expected {expected}")
            if r:
                ours += [ms / 1000 for ms in batch_ms]
                plain += [ms / 1000 for ms in plain_ms]
                split += [ms / 1000 for ms in split_ms]
                ours_query.append(whole)
                plain_query.append(plain_whole)
        ratio = statistics.median(ours) / statistics.median(plain)
        query_ratio = statistics.median(ours_query) / statistics.median(plain_query)
        figures["overhead"] = {
            "micro_batch_seconds": {"ours": ours, "plain": plain, "ratio": ratio},
            "query_seconds": {"ours": ours_query, "plain": plain_query, "ratio": query_ratio},
            "parquet_source_tagged_write_seconds": {
                "micro_batches": split,
                "ratio": statistics.median(split) / statistics.median(plain),
            },
        }
        outcome.row(
            f"streaming job, a micro-batch of one barrier of {rows:,} rows",
            f"{statistics.median(ours):.2f} s",
            baseline=f"{statistics.median(plain):.2f} s plain parquet foreachBatch",
            ratio=ratio,
            goal="≤ 1.15x",
            passed=ratio <= OVERHEAD,
        )
        outcome.row(
            "the same micro-batches read by Spark's parquet source, written by the catalog (tagged Delta commit)",
            f"{statistics.median(split):.2f} s",
            baseline=f"{statistics.median(plain):.2f} s plain parquet foreachBatch",
            ratio=statistics.median(split) / statistics.median(plain),
        )
        outcome.row(
            f"streaming job, a query started for {BARRIERS} such barriers (availableNow, start to stop)",
            f"{statistics.median(ours_query):.2f} s",
            baseline=f"{statistics.median(plain_query):.2f} s plain parquet foreachBatch",
            ratio=query_ratio,
        )
    outcome.figures = figures
    return outcome
