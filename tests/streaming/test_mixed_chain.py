"""A mixed chain, batch → streaming → batch, under randomized weak and strong reads: every read set is produced
together. Each table's rows carry what they were computed from, so a set is produced together exactly when every
table in it was computed from the same root rows (equal row counts, the leaf's stored count included)."""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_client import DeltaCatalog, EtlJob, Inputs, MetaServiceClient, NoConsistentVersion
from spark_client.modes import Append, Overwrite
from spark_client.streaming import StreamingJob
from tests import support
from tests.streaming.starting import started

RAW, ENRICHED, STREAMED, TOTALS = "lake.raw.orders", "lake.mid.enriched", "lake.mid.streamed", "lake.mart.totals"
TABLES = (RAW, ENRICHED, STREAMED, TOTALS)
ROUNDS, READS = 5, 1000


def orders(spark: SparkSession, round_: int) -> DataFrame:
    return spark.createDataFrame(
        [(100 * round_ + i, round_, i * 1.5) for i in range(3 + round_)], "id long, r long, x double"
    )


def represented(lake: DeltaCatalog, table: str, snapshot: int, cache: dict[tuple[str, int], int]) -> int:
    """How many root rows `table` at `snapshot` was computed from (read by deltalake, no Spark)."""
    key = (table, snapshot)
    if key not in cache:
        data = DeltaTable(lake.location(table), version=snapshot).to_pyarrow_table()
        cache[key] = int(data.column("n")[0].as_py()) if table == TOTALS else data.num_rows
    return cache[key]


def test_batch_streaming_batch_chain_answers_only_read_sets_produced_together(
    spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, server: support.ServerProcess, tmp_path: Path
) -> None:
    enrich = EtlJob(
        spark, client, lake, job_id="enrich", sources=[RAW], sinks=[ENRICHED], start="earliest", future_roots=[RAW]
    )
    totals = EtlJob(spark, client, lake, job_id="totals", sources=[STREAMED], sinks=[TOTALS], start="earliest")
    stream = StreamingJob(
        spark,
        client,
        lake,
        job_id="stream",
        sources=[ENRICHED],
        sinks=[STREAMED],
        checkpoint=tmp_path / "checkpoint",
        start="earliest",
    )
    lake.append(spark, orders(spark, 0), RAW)
    for job in (enrich, stream, totals):
        job.register()

    def enriched(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {ENRICHED: inputs.changes(RAW).withColumn("y", F.col("x") * 2)}

    def summed(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {TOTALS: inputs[STREAMED].agg(F.count("*").alias("n"), F.sum("y").alias("y"))}

    assert enrich.run_once(enriched, mode=Append()).action == "process"  # the stream's input has a schema
    query = started(
        lambda: stream.start(
            stream.read(ENRICHED).where(F.col("y") >= 0), mode=Append(), trigger={"processingTime": "200 milliseconds"}
        )
    )

    done, stop = threading.Event(), threading.Event()
    checked: list[tuple[str, int, dict[str, int]]] = []
    mixed: list[object] = []
    failures: list[BaseException] = []
    cache: dict[tuple[str, int], int] = {}

    def read() -> None:
        rng = random.Random(30)
        try:
            with MetaServiceClient(server.base_url) as reader:
                while not stop.is_set() and (not done.is_set() or len(checked) < READS):
                    tables = rng.sample(TABLES, rng.randint(2, len(TABLES)))
                    consistency = rng.choice(("weak", "strong"))
                    try:
                        answer = reader.versions(tables, consistency)  # type: ignore[arg-type]
                    except NoConsistentVersion:
                        continue
                    counts = {t: represented(lake, t, s, cache) for t, s in answer.versions.items()}
                    checked.append((consistency, answer.barrier, counts))
                    if len(set(counts.values())) != 1:
                        mixed.append((consistency, answer.barrier, dict(answer.versions), counts))
        except BaseException as exc:  # the main thread reports it
            failures.append(exc)

    reader_thread = threading.Thread(target=read, name="reads")
    reader_thread.start()
    try:
        for round_ in range(ROUNDS):
            if round_:
                lake.append(spark, orders(spark, round_), RAW)
                enrich.run_pending(enriched, mode=Append())
            query.processAllAvailable()
            totals.run_pending(summed, mode=Overwrite())
    except BaseException:
        stop.set()  # the reads end now: the failure is what the test reports
        raise
    finally:
        done.set()
        reader_thread.join(600)
        query.stop()
    assert not failures, failures
    assert query.exception() is None
    assert len(checked) >= READS and not mixed, mixed[:5]
    strong = [c for c in checked if c[0] == "strong"]
    assert len({c[1] for c in strong}) > 1, "strong reads answered more than one barrier during the run"
    final = client.versions(list(TABLES), "strong").versions
    assert {represented(lake, t, s, cache) for t, s in final.items()} == {sum(3 + r for r in range(ROUNDS))}
