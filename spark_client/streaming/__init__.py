"""Streaming jobs: Structured Streaming queries whose micro-batches are MetaService barriers.

Example:
    from spark_client.streaming import StreamingJob
    from spark_client.modes import Append

    job = StreamingJob(spark, client, catalog, job_id="silver", sources=["lake.raw.orders"],
                       sinks=["lake.mart.orders"], checkpoint="/chk/silver", start="earliest")
    job.register()
    query = job.start(job.read("lake.raw.orders"), mode=Append(), trigger={"availableNow": True})
    query.awaitTermination()

Imports are lazy (PEP 562), as in `spark_client`: Spark's Python processes that plan and read the `metaservice`
source import `spark_client.streaming.source` only, not the job and the HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_client._lazy import exports

if TYPE_CHECKING:
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

# public name → the module defining it
_MODULES = {
    "BarrierFigures": "spark_client.streaming.progress",
    "BarrierProgress": "spark_client.streaming.progress",
    "BatchResult": "spark_client.streaming.job",
    "CheckpointAfterRollback": "spark_client.streaming.job",
    "MetaServiceDataSource": "spark_client.streaming.source",
    "StreamingJob": "spark_client.streaming.job",
    "UnexpectedMicroBatch": "spark_client.streaming.job",
    "UnsupportedTrigger": "spark_client.streaming.job",
    "check_trigger": "spark_client.streaming.job",
    "register_stream_source": "spark_client.streaming.source",
}


__getattr__, __dir__ = exports(__name__, _MODULES, globals())


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
