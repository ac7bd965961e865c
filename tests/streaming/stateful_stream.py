"""The stateful streaming job: a windowed aggregation with a watermark, written with Merge in update mode.

`python -m tests.streaming.stateful_stream BASE_URL LAKE_ROOT CHECKPOINT` restarts the query from its checkpoint
and processes what is there; with `METASERVICE_CLIENT_FAILPOINT` set, the driver dies there (SIGKILL).
"""

from __future__ import annotations

import datetime as dt
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark_client import DeltaCatalog, MetaServiceClient
from spark_client.modes import Merge
from spark_client.streaming import StreamingJob
from tests.streaming.starting import started

RAW, OUT = "lake.raw.clicks", "lake.mart.clicks_per_hour"
SCHEMA = "id long, k long, v long, ts timestamp"
KEYS = ("window_start", "k")
BASE = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def batch(spark: SparkSession, round_: int) -> DataFrame:
    """Round n: 7 rows 20 minutes later than round n-1's, one of them 50 minutes late (within the watermark),
    so windows get rows from several barriers."""
    start = BASE + dt.timedelta(minutes=20 * round_)
    rows = [(1000 * round_ + i, i % 3, round_ + i, start + dt.timedelta(minutes=2 * i)) for i in range(6)]
    rows.append((1000 * round_ + 99, 1, 7, start - dt.timedelta(minutes=50)))
    return spark.createDataFrame(rows, SCHEMA)


def aggregate(df: DataFrame) -> DataFrame:
    """Per hour and key: the sum and count of the values (the batch recomputation applies it to the table)."""
    return (
        df.groupBy(F.window("ts", "1 hour"), "k")
        .agg(F.sum("v").alias("total"), F.count("*").alias("n"))
        .select(F.col("window.start").alias("window_start"), "k", "total", "n")
    )


def make_job(spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, checkpoint: str) -> StreamingJob:
    job = StreamingJob(
        spark,
        client,
        lake,
        job_id="clicks",
        sources=[RAW],
        sinks=[OUT],
        checkpoint=checkpoint,
        start="earliest",
        future_roots=[RAW],
    )
    job.register()
    return job


def start(job: StreamingJob) -> StreamingQuery:
    clicks = job.read(RAW).withWatermark("ts", "3 hours")
    return job.start(
        aggregate(clicks), mode=Merge(keys=KEYS), output_mode="update", trigger={"processingTime": "100 milliseconds"}
    )


def main(base_url: str, lake_root: str, checkpoint: str) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    with MetaServiceClient(base_url) as client:
        job = make_job(spark, client, DeltaCatalog(lake_root), checkpoint)
        query = started(lambda: start(job))
        try:
            query.processAllAvailable()
        finally:
            query.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
