"""The streaming job of the crash matrix, run in-process and as a driver killed at a failpoint.

`python -m tests.streaming.crash_stream BASE_URL FORMAT LAKE_ROOT CHECKPOINT TRIGGER PATH` runs the query until
no barrier is left (availableNow: until it stops; processingTime: `processAllAvailable`); with
`METASERVICE_CLIENT_FAILPOINT` set, the driver dies there (SIGKILL), as `spark_client._failpoints` describes.
PATH is "rows" (`job.start`: the rows flow through the stream) or "files" (`job.start_stateless`: the same
computation as a batch transform per micro-batch, the barrier's files read by Spark's parquet reader).
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark_client import MetaServiceClient
from spark_client.catalog import Catalog
from spark_client.modes import Append
from spark_client.streaming import StreamingJob
from tests.spark.formats import make_catalog
from tests.streaming.starting import started

RAW, OUT = "lake.raw.events", "lake.mart.events"
SCHEMA = "id long, k long, v long"
TRIGGERS: dict[str, dict[str, object]] = {
    "availableNow": {"availableNow": True},
    "processingTime": {"processingTime": "100 milliseconds"},
}


def batch(spark: SparkSession, first: int, count: int) -> DataFrame:
    return spark.createDataFrame([(i, i % 3, 10 * i) for i in range(first, first + count)], SCHEMA)


def transform(df: DataFrame) -> DataFrame:
    """What the job computes from the raw rows (the batch recomputation applies it to the whole table)."""
    return df.where(F.col("v") % 20 == 0).withColumn("w", F.col("v") * 2 + F.col("k"))


def make_job(spark: SparkSession, client: MetaServiceClient, catalog: Catalog, checkpoint: str) -> StreamingJob:
    job = StreamingJob(
        spark,
        client,
        catalog,
        job_id="stream",
        sources=[RAW],
        sinks=[OUT],
        checkpoint=checkpoint,
        start="earliest",
        future_roots=[RAW],
    )
    job.register()
    return job


PATHS = ("rows", "files")


def start(job: StreamingJob, trigger: str, path: str) -> StreamingQuery:
    if path == "files":
        return job.start_stateless(
            lambda inputs: {OUT: transform(inputs.changes(RAW))}, mode=Append(), trigger=TRIGGERS[trigger]
        )
    return job.start(transform(job.read(RAW)), mode=Append(), trigger=TRIGGERS[trigger])


def run(job: StreamingJob, trigger: str, path: str = "rows") -> None:
    """Process every barrier there is now, then stop."""
    query = started(lambda: start(job, trigger, path))
    try:
        if trigger == "availableNow":
            query.awaitTermination()
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")


def main(base_url: str, format_name: str, lake_root: str, checkpoint: str, trigger: str, path: str) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    with MetaServiceClient(base_url) as client:
        run(make_job(spark, client, make_catalog(format_name, lake_root), checkpoint), trigger, path)


if __name__ == "__main__":
    main(*sys.argv[1:7])
