"""Starting a streaming query on a machine loaded far beyond its cores.

Spark waits a fixed 10 s for the Python process that plans a Python data source to connect back; under a load
average of 20+ on 2 cores that start can take longer and the query fails before its first micro-batch ("Python
worker failed to connect back"). Nothing was processed then, so starting again from the checkpoint is exactly
what a user does (docs/streaming.md, Limits). Any other failure is raised as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.query import StreamingQuery

SLOW_START = "failed to connect back"
ATTEMPTS = 4


def started(start: Callable[[], StreamingQuery]) -> StreamingQuery:
    """`start()` a query and process what is available now; start it again (up to 4 times) while it fails only
    because its Python source planner could not start in time."""
    for attempt in range(ATTEMPTS):
        query = start()
        try:
            query.processAllAvailable()
            return query
        except StreamingQueryException as exc:
            query.stop()
            if SLOW_START not in str(exc) or attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
