"""Concurrent callers asking for the same work share one run of it (per process)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """Runs `work` once per key at a time: a caller that asks while a run for its key is under way awaits that run's
    result instead of starting its own.

    Why: strong reads settle the idle writers that hold them back (services/barriers.settle_idle), and a hundred
    concurrent reads of one table all found the same writer to settle. Each ran the protocol's plan and
    compare-and-set write for it; all but one lost the compare-and-set and planned again, against the writer's own
    `next` too, and reads took seconds. Sharing the run leaves one write per writer and process at a time.

    The shared run is shielded: a caller that is cancelled (its client went away) stops waiting, the run goes on for
    the others. Its exception reaches every caller that waited on it.

    Example:
        flight: SingleFlight[str, bool] = SingleFlight()
        settled = await flight.run("enrich", lambda: settle("enrich"))
    """

    def __init__(self) -> None:
        self._running: dict[K, asyncio.Task[V]] = {}

    def __len__(self) -> int:
        """Runs under way (for tests)."""
        return len(self._running)

    def running(self, key: K) -> bool:
        """A run for `key` is under way (a caller that need not wait for it can go on without it)."""
        return key in self._running

    async def run(self, key: K, work: Callable[[], Awaitable[V]]) -> V:
        task = self._running.get(key)
        if task is None:
            task = asyncio.ensure_future(self._owned(key, work))
            self._running[key] = task
        return await asyncio.shield(task)

    async def _owned(self, key: K, work: Callable[[], Awaitable[V]]) -> V:
        try:
            return await work()
        finally:
            self._running.pop(key, None)
