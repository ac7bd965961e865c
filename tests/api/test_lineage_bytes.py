"""`GET /lineage` answers byte for byte what the code before the 2026-12-02 speed-up answered, on a sizeable lineage.

The catalog is written with SQL at fixed ids, barriers and times (`seed`): a root read by 150 jobs, a chain, a
diamond, a lagging branch, a table that never completed, jobs with more runs than a node shows (committed, aborted,
in flight, idle; times with and without microseconds; unknown input times), formats of every kind, and edges
removed and added over time. `GOLDEN` holds the answers of that code (commit 3de4faa, written by running this
module as a script: `python -m tests.api.test_lineage_bytes URL`), one per query of `QUERIES`: the whole graph,
around a table, cut by the node cap, and as of a barrier and of a time. Never rewrite them to make this test pass.

Freshness, its alias `delay_seconds` and lag are measured against the database clock, so in the answers of the
current graph they differ from the stored ones by the time between the two answers, the same for every figure;
every other byte is compared as it is.
"""

from __future__ import annotations

import gzip
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

GOLDEN = Path(__file__).resolve().parent / "golden" / "lineage"
BASE = 1_796_000_000_000_000  # barrier numbers are µs since the epoch
T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
FAN = 150


def barrier(k: int) -> int:
    return BASE + k * 60_000_000


def at(minutes: float, micros: int = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, microseconds=micros)


def issued(k: int) -> datetime:
    return at(k, 0 if k % 2 else 1_234 * k)  # odd barriers on whole seconds, even ones with microseconds


HEAD = 6
QUERIES: dict[str, dict[str, Any]] = {
    "whole": {},
    "around-both": {"table": "lake.mart.enriched", "direction": "both", "depth": 3},
    "fan-capped": {"table": "lake.raw.events", "direction": "downstream", "max_nodes": 101},
    "whole-capped": {"max_nodes": 40},
    "as-of-barrier": {"as_of": barrier(3)},
    "as-of-time": {"table": "lake.raw.events", "direction": "downstream", "as_of": "2026-11-30T08:02:30.5Z"},
}
# a table's freshness, its alias and its lag (a job's lag, before its runs, is between two barriers)
NOW_FIGURES = re.compile(
    rb'"(delay_seconds|freshness_seconds|lag_seconds)":(null|[-+0-9.eE]+)(?=[,}])(?!,"recent_runs")'
)


def seed(url: str) -> None:
    """The catalog, written straight into the schema (ids given: answers list edges by table and job id)."""
    tables: list[tuple[int, str, str | None, int | None]] = []  # id, name, format, latest snapshot
    jobs: list[tuple[int, str, int | None]] = []  # id, name, last barrier
    edges: list[tuple[int, int, str, datetime, int, int | None, datetime | None]] = []
    ranges: list[tuple[int, int, int | None, int | None, str, int | None, datetime]] = []
    runs: list[tuple[int, int, int, str, datetime | None, datetime, datetime | None]] = []
    ids: dict[str, int] = {}

    def table(name: str, fmt: str | None = "delta", latest: int | None = None) -> int:
        ids[name] = len(tables) + 1
        tables.append((ids[name], name, fmt, latest))
        return ids[name]

    def job(name: str, last: int | None) -> int:
        ids[name] = len(jobs) + 1
        jobs.append((ids[name], name, None if last is None else barrier(last)))
        return ids[name]

    def edge(j: int, t: int, role: str, added: int = 0, removed: int | None = None) -> None:
        # `added_after` / `removed_after`: the newest barrier issued when the edge was added / removed
        created = at(added + 0.5) if added else at(-30)
        gone = (None, None) if removed is None else (barrier(removed), at(removed + 0.5))
        edges.append((j, t, role, created, barrier(added) if added else 0, *gone))

    def held(t: int, spans: list[tuple[int, int | None, int | None]], kind: str, writer: int | None = None) -> None:
        for first, last, snapshot in spans:
            ranges.append((t, barrier(first), None if last is None else barrier(last), snapshot,
                           kind if snapshot is not None else "aborted", writer, issued(first)))  # fmt: skip

    def ran(j: int, steps: list[tuple[int, int, str]], *, ready: bool = True) -> None:
        for first, last, status in steps:
            started = issued(last) + timedelta(seconds=1, microseconds=250 * j)
            finished = None if status == "in_flight" else started + timedelta(seconds=2 + j % 3, microseconds=999 * j)
            runs.append((j, barrier(first), barrier(last), status,
                         started - timedelta(microseconds=500_000) if ready else None, started, finished))  # fmt: skip

    events = table("lake.raw.events", latest=12)
    held(events, [(1, 2, 10), (3, None, 11)], "sealed")
    for i in range(FAN):
        out = table(f"lake.fan.t{i:03d}", ("delta", "iceberg", "paimon", None)[i % 4])
        j = job(f"fan-{i:03d}", 6 if i % 5 else 4)
        edge(j, events, "source")
        edge(j, out, "sink")
        held(out, [(1, 3, 1), (4, 6 if i % 5 else 4, 2)], "committed", j)
        ran(j, [(1, 1, "committed"), (2, 3, "idle"), (4, 4, "committed"), (5, 6, "committed")][: 4 if i % 5 else 3])
    orders = table("lake.raw.orders", latest=21)
    held(orders, [(1, 4, 20), (5, None, 21)], "sealed")  # new data sealed at barrier 5: what lagging tables lack
    customers = table("lake.raw.customers", "iceberg", latest=5)
    held(customers, [(1, None, 5)], "sealed")
    chain = [orders]
    for name, writer, last in (("enriched", "enrich", 6), ("daily", "daily", 4), ("weekly", "weekly", 4)):
        t = table(f"lake.mart.{name}")
        j = job(writer, last)
        edge(j, chain[-1], "source")
        edge(j, t, "sink")
        held(t, [(1, 2, 100), (3, 3, None), (4, last, 101)], "committed", j)  # an aborted barrier in between
        ran(j, [(1, 1, "committed"), (2, 2, "committed"), (3, 3, "aborted"), (4, 4, "committed"),
                (5, 5, "aborted"), (6, 6, "committed")][: last], ready=writer != "daily")  # fmt: skip
        chain.append(t)
    revenue = table("lake.mart.revenue", "paimon")
    j = job("revenue", 5)
    edge(j, chain[1], "source")
    edge(j, customers, "source")
    edge(j, revenue, "sink")
    edge(j, events, "source", added=4)  # read from barrier 4 on
    held(revenue, [(1, 5, 7)], "committed", j)
    ran(j, [(1, 1, "committed"), (2, 2, "committed"), (3, 3, "committed"), (4, 4, "committed"),
            (5, 5, "committed"), (6, 6, "in_flight")])  # fmt: skip
    never = table("lake.raw.never", None)
    old = table("lake.raw.old")
    held(old, [(1, None, 1)], "sealed")
    j = job("audit", None)  # registered, never ran
    edge(j, never, "source")
    edge(j, old, "source", removed=3)  # stopped reading it at barrier 3
    edge(j, chain[1], "source", added=2)
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.cursor().executemany(
            "INSERT INTO barriers (barrier, issued_at) VALUES (%s, %s)",
            [(barrier(k), issued(k)) for k in range(1, HEAD + 1)],
        )
        conn.execute("UPDATE barrier_clock SET last_barrier = %s", (barrier(HEAD),))
        conn.cursor().executemany(
            "INSERT INTO tables (id, name, format, latest_snapshot_id, latest_snapshot_at, created_at)"
            " OVERRIDING SYSTEM VALUE VALUES (%s, %s, %s, %s, %s, %s)",
            [(i, n, f, s, None if s is None else at(5.5), at(-60)) for i, n, f, s in tables],
        )
        conn.cursor().executemany(
            "INSERT INTO jobs (id, name, last_barrier, registered_at) OVERRIDING SYSTEM VALUE VALUES (%s, %s, %s, %s)",
            [(*row, at(-60)) for row in jobs],
        )
        conn.cursor().executemany(
            "INSERT INTO lineage_edges (job_id, table_id, role, created_at, added_after, removed_after, removed_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            edges,
        )
        conn.cursor().executemany(
            "INSERT INTO snapshot_ranges (table_id, first_barrier, last_barrier, snapshot_id, kind, job_id,"
            " created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [(*r, r[-1]) for r in ranges],
        )
        conn.cursor().executemany(
            "INSERT INTO job_runs (job_id, first_barrier, barrier, status, inputs_ready_at, started_at, finished_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            runs,
        )


def path(query: dict[str, Any]) -> str:
    return str(httpx.URL("/lineage", params=query))


def now_figures(answer: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The answer with every clock-dependent figure masked, and those figures in order."""
    return NOW_FIGURES.sub(rb'"\1":#', answer), NOW_FIGURES.findall(answer)


def micros(text: bytes) -> int:
    return round(float(text) * 1_000_000)


@pytest.fixture(name="seeded")
def fx_seeded(api: httpx.Client, database_url: str) -> Iterator[httpx.Client]:
    seed(database_url)
    yield api


@pytest.mark.parametrize("name", list(QUERIES))
def test_answers_are_the_bytes_the_code_before_answered(seeded: httpx.Client, name: str) -> None:
    answer = seeded.get(path(QUERIES[name]))
    assert answer.status_code == 200, answer.text
    expected = gzip.decompress((GOLDEN / f"{name}.json.gz").read_bytes())
    got, figures = now_figures(answer.content)
    want, stored = now_figures(expected)
    assert got == want
    assert [f for f, _ in figures] == [f for f, _ in stored]
    # the clock moved between the two answers: every figure measured against it moved by as much, to the µs
    moved = set()
    for (_, now), (_, then) in zip(figures, stored, strict=True):
        if then in (b"null", b"0.0"):  # nothing completed, or nothing lacking
            assert now == then
        else:
            moved.add(micros(now) - micros(then))
    assert len(moved) <= 1 and min(moved, default=0) >= 0, moved
    if "as_of" in QUERIES[name]:
        assert answer.content == expected


def write_golden(url: str) -> None:
    """Seed an empty migrated database at `url` and store the answers of the code on the path (in-process app)."""
    import asyncio

    from asgi_lifespan import LifespanManager

    from metaservice.app import create_app
    from metaservice.settings import Settings

    async def answers() -> None:
        app = create_app(Settings(database_url=url))
        async with (
            LifespanManager(app) as manager,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=manager.app), base_url="http://golden") as client,
        ):
            for name, query in QUERIES.items():
                answer = await client.get(path(query))
                assert answer.status_code == 200, answer.text
                GOLDEN.mkdir(parents=True, exist_ok=True)
                (GOLDEN / f"{name}.json.gz").write_bytes(gzip.compress(answer.content, mtime=0))

    seed(url)
    asyncio.run(answers())


if __name__ == "__main__":
    write_golden(sys.argv[1])
