"""`metaservice_issue_barriers`: what one call does for a batch of coalesced requests (the allocator sends every
request that arrived while the previous call ran). Called directly, so the batch's make-up is exact."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import psycopg
from psycopg.types.json import Jsonb

from metaservice.repositories.allocator import AllocationRequest
from tests.model.seal_marks import unmarked_tables_needing_a_seal


def _call(url: str, requests: list[AllocationRequest]) -> list[dict[str, Any]]:
    """The function's answers to one batch, sent in the allocator's own wire form."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT metaservice_issue_barriers(%s)", [Jsonb([r.wire() for r in requests])])
        answers: list[dict[str, Any]] = row.fetchone()[0]  # type: ignore[index]
    return answers


def _roots(api: httpx.Client, url: str, *names: str) -> dict[str, int]:
    """Register each table as a job's source (a root); their ids."""
    for i, name in enumerate(names):
        assert api.post(f"/register/source/job{i}/{name.replace('.', '/')}").status_code == 201
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT name, id FROM tables WHERE name = ANY(%s)", [list(names)]).fetchall())


def test_one_barrier_seals_every_snapshot_a_batch_of_next_calls_reports(api: httpx.Client, database_url: str) -> None:
    ids = _roots(api, database_url, "lake.raw.a", "lake.raw.b", "lake.raw.c")
    answers = _call(
        database_url,
        [
            AllocationRequest("seal", by="test", roots={name: 5}, when_unsealed=[table_id])
            for name, table_id in sorted(ids.items())
        ],
    )
    assert [a["error"] for a in answers] == [None, None, None]
    first = answers[0]
    assert first["barrier"] is not None
    assert first["sealed"] == {"lake.raw.a": 5, "lake.raw.b": 5, "lake.raw.c": 5}
    assert [a["barrier"] for a in answers[1:]] == [None, None]  # their snapshots are sealed already
    assert [a["latest"] for a in answers] == [{"lake.raw.a": 5}, {"lake.raw.b": 5}, {"lake.raw.c": 5}]
    assert [b["barrier"] for b in api.get("/barriers").json()["barriers"]] == [first["barrier"]]


def test_refused_requests_and_key_replays_of_a_batch_record_nothing(api: httpx.Client, database_url: str) -> None:
    _roots(api, database_url, "lake.raw.a", "lake.raw.b")
    assert api.post("/register/sink/writer/lake/mart/m").status_code == 201
    answers = _call(
        database_url,
        [
            AllocationRequest("barrier", by="test", key="k1", roots={"lake.raw.a": 3}),
            AllocationRequest("barrier", by="test", key="k1", roots={"lake.raw.b": 9}),  # a retry racing: a replay
            AllocationRequest("report", by="test", roots={"lake.raw.b": 4, "lake.raw.nope": 1}),  # unknown: refused
            AllocationRequest("report", by="test", roots={"lake.mart.m": 7}),  # a job writes it: refused
            AllocationRequest("barrier", by="test"),
        ],
    )
    assert answers[0]["barrier"] is not None and not answers[0]["replayed"]
    assert answers[0]["sealed"] == {"lake.raw.a": 3}
    assert answers[1]["replayed"] and answers[1]["barrier"] == answers[0]["barrier"]
    assert answers[2]["error"] == {"code": "not_found", "tables": ["lake.raw.nope"]}
    assert answers[3]["error"]["code"] == "not_root"
    assert answers[4]["barrier"] > answers[0]["barrier"] and answers[4]["sealed"] == {}
    assert api.get("/tables/lake/raw/b").json()["latest_snapshot_id"] is None  # neither the replay nor the refusal
    assert api.get("/tables/lake/mart/m").json()["latest_snapshot_id"] is None


def test_a_seal_reads_the_tables_marked_since_the_last_barrier_and_clears_the_marks(
    api: httpx.Client, database_url: str
) -> None:
    """The seal no longer walks every root: it reads the tables a report (or a rollback) marked. A root changed
    behind every API path (here: straight in SQL) is therefore not sealed until something marks it."""
    _roots(api, database_url, "lake.raw.a", "lake.raw.b")
    first = _call(database_url, [AllocationRequest("barrier", by="test", roots={"lake.raw.a": 5})])[0]
    assert first["sealed"] == {"lake.raw.a": 5}
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM tables WHERE seal_candidate").fetchone() == (0,)
        conn.execute("UPDATE tables SET latest_snapshot_id = 9 WHERE name = 'lake.raw.b'")  # no mark
    assert unmarked_tables_needing_a_seal(database_url) == ["lake.raw.b"]
    unmarked = _call(database_url, [AllocationRequest("barrier", by="test")])[0]
    assert unmarked["barrier"] > first["barrier"] and unmarked["sealed"] == {}  # a walk of every root would seal b
    reported = api.post("/tables/lake/raw/b/snapshots", json={"snapshot_id": 9})
    assert reported.status_code == 200, reported.text
    assert unmarked_tables_needing_a_seal(database_url) == []
    marked = _call(database_url, [AllocationRequest("barrier", by="test")])[0]
    assert marked["sealed"] == {"lake.raw.b": 9}


def test_a_seal_waits_for_a_table_a_rollback_holds_and_goes_on_once_it_commits(
    api: httpx.Client, database_url: str
) -> None:
    """A rollback locks its scope's tables, then the clock; an allocation locks the tables it may seal, by id, then
    the clock: the same order, so the allocation waits for the rollback's row and goes on once the rollback
    committed (no deadlock, nothing skipped, no table left needing a seal unmarked)."""
    from metaservice.repositories import rollbacks as rollback_rows

    ids = _roots(api, database_url, "lake.raw.a", "lake.raw.b")
    assert api.post("/tables/lake/raw/b/snapshots", json={"snapshot_id": 1}).status_code == 200  # b is marked
    answers: list[dict[str, Any]] = []

    def allocate() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("SET application_name = 'allocation-under-test'")
            row = conn.execute(
                "SELECT metaservice_issue_barriers(%s)", [Jsonb([AllocationRequest("barrier", by="t").wire()])]
            ).fetchone()
            assert row is not None
            answers.append(row[0][0])

    def waiting_for_a_lock() -> bool:
        with psycopg.connect(database_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE application_name = 'allocation-under-test'"
            ).fetchone()
            return row is not None and row[0] == "Lock"

    async def interleaving() -> None:
        async with await psycopg.AsyncConnection.connect(database_url) as rollback:  # a transaction, held open
            await rollback_rows.lock_tables(rollback, table_ids=[ids["lake.raw.a"]])  # the rollback's first step
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(anyio.to_thread.run_sync, allocate)
                while not await anyio.to_thread.run_sync(waiting_for_a_lock):  # decided by the server's state
                    await anyio.sleep(0.05)
                assert answers == []  # it waits for the rollback's row
                await rollback.execute("SELECT 1 FROM barrier_clock WHERE id = 1 FOR UPDATE")  # the clock is free
                await rollback.commit()

    anyio.run(interleaving)
    assert answers[0]["sealed"] == {"lake.raw.b": 1}  # the allocation went on and sealed what was due
    assert unmarked_tables_needing_a_seal(database_url) == []
