"""BarrierProgress: a StreamingQueryListener (no jar) that reports each micro-batch's barrier, the barrier's lag
and the micro-batch's duration."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from spark_client.streaming._offsets import MARK

logger = logging.getLogger("spark_client.streaming")


@dataclass(frozen=True)
class BarrierFigures:
    """One micro-batch of a streaming job as the listener saw it.

    Attributes:
        query: the query's name (the job id unless given).
        batch_id: Spark's micro-batch id.
        barrier: the barrier it processed.
        lag_seconds: how long after the barrier was issued the micro-batch finished (a barrier is its issue time
            in microseconds since the epoch).
        duration_seconds: the micro-batch's duration as Spark measured it.
    """

    query: str
    batch_id: int
    barrier: int
    lag_seconds: float
    duration_seconds: float


class BarrierProgress(StreamingQueryListener):
    """Logs every micro-batch of a `metaservice` stream (barrier, lag, duration) and keeps the latest per query.

    Example:
        progress = BarrierProgress()
        spark.streams.addListener(progress)
        ...
        print(progress.latest["clicks_per_hour"].lag_seconds)
    """

    def __init__(self) -> None:
        self.latest: dict[str, BarrierFigures] = {}
        self._lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        figures = figures_of(event.progress)
        if figures is None:
            return
        with self._lock:
            self.latest[figures.query] = figures
        logger.info(
            "streaming job %s: micro-batch %d, barrier %d, lag %.2fs, duration %.2fs",
            figures.query,
            figures.batch_id,
            figures.barrier,
            figures.lag_seconds,
            figures.duration_seconds,
        )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def figures_of(progress: Any) -> BarrierFigures | None:
    """The figures of a `StreamingQueryProgress` whose sources include a `metaservice` stream (else None)."""
    barrier = 0
    for source in progress.sources:
        try:
            offset = json.loads(source.endOffset) if isinstance(source.endOffset, str) else source.endOffset
        except (TypeError, ValueError):
            continue
        if isinstance(offset, dict) and offset.get(MARK) == 1:
            barrier = max(barrier, int(offset.get("barrier", 0)))
    if not barrier:
        return None
    return BarrierFigures(
        query=str(progress.name or progress.id),
        batch_id=int(progress.batchId),
        barrier=barrier,
        lag_seconds=max(0.0, time.time() - barrier / 1e6),
        duration_seconds=float(progress.batchDuration) / 1000,
    )
