"""Concurrent callers for one key share one run (metaservice/services/single_flight.py)."""

from __future__ import annotations

import asyncio
from functools import partial

import pytest

from metaservice.services.single_flight import SingleFlight


def test_callers_of_one_key_share_a_run_and_other_keys_run_apart() -> None:
    async def scenario() -> tuple[list[int], list[str]]:
        flight: SingleFlight[str, int] = SingleFlight()
        release = asyncio.Event()
        started: list[str] = []

        async def work(key: str) -> int:
            started.append(key)
            await release.wait()
            return len(started)

        callers = [asyncio.ensure_future(flight.run(k, partial(work, k))) for k in ("a", "a", "a", "b")]
        while len(started) < 2:  # both runs under way, the joiners waiting on "a"'s
            await asyncio.sleep(0)
        assert len(flight) == 2 and flight.running("a") and not flight.running("c")
        release.set()
        results = list(await asyncio.gather(*callers))
        assert len(flight) == 0
        again = await flight.run("a", lambda: work("a"))  # a run that ended is not reused
        return [*results, again], started

    results, started = asyncio.run(scenario())
    assert started == ["a", "b", "a"]
    assert results[:3] == [results[0]] * 3 and results[3] == results[0]  # one result for the three "a" callers
    assert results[4] == 3


def test_a_cancelled_caller_leaves_the_run_to_the_others_and_errors_reach_every_caller() -> None:
    async def scenario() -> None:
        flight: SingleFlight[str, int] = SingleFlight()
        release = asyncio.Event()

        async def work() -> int:
            await release.wait()
            raise RuntimeError("the database went away")

        first = asyncio.ensure_future(flight.run("a", work))
        second = asyncio.ensure_future(flight.run("a", work))
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        release.set()
        with pytest.raises(RuntimeError, match="went away"):
            await second

    asyncio.run(scenario())
