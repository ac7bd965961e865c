"""Streaming jobs: Structured Streaming queries whose micro-batches are MetaService barriers.

Example:
    from spark_client.streaming import StreamingJob
    from spark_client.modes import Append

    job = StreamingJob(spark, client, catalog, job_id="silver", sources=["lake.raw.orders"],
                       sinks=["lake.mart.orders"], checkpoint="/chk/silver", start="earliest")
    job.register()
    query = job.start(job.read("lake.raw.orders"), mode=Append(), trigger={"availableNow": True})
    query.awaitTermination()
"""

from spark_client.streaming.job import (
    BatchResult,
    CheckpointAfterRollback,
    StreamingJob,
    UnexpectedMicroBatch,
    UnsupportedTrigger,
    check_trigger,
)
from spark_client.streaming.progress import BarrierFigures, BarrierProgress
from spark_client.streaming.source import MetaServiceDataSource, register_stream_source

__all__ = [
    "BarrierFigures",
    "BarrierProgress",
    "BatchResult",
    "CheckpointAfterRollback",
    "MetaServiceDataSource",
    "StreamingJob",
    "UnexpectedMicroBatch",
    "UnsupportedTrigger",
    "check_trigger",
    "register_stream_source",
]
