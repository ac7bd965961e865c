"""The set-based allocation function (migration 2026-11-25-0900) answers every batch as the request-by-request one
(migration 2026-11-24-2200) did, and leaves the same tables, ranges and barriers behind.

The previous function is installed in the session's temporary schema; hypothesis draws batches that mix every
kind of request over a lineage with every state a report meets, the lineage's changes included: roots with and
without snapshots, a table a job writes, a table handed to another writer, an orphan whose writer left, an unknown
name, a job with a barrier in flight, a job reading the orphan, a job that dropped a source, a retired job, a
revived one, an unknown job, keys issued before and keys repeated in the batch. Each function runs the batch in
its own transaction, which is rolled back, so both start from the same state. Barrier values come from the clock,
so barriers the call issued are compared by their order; everything else is compared as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from alembic.script import ScriptDirectory
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from metaservice.db import migrate
from metaservice.repositories.allocator import AllocationRequest

_REQUEST_BY_REQUEST = "6e1f3a5b7c92"  # migration 2026-11-24-2200_seal_candidates
ROOTS = ("lake.raw.a", "lake.raw.b", "lake.raw.c", "lake.raw.d", "lake.raw.e", "lake.raw.o")
NAMES = (*ROOTS, "lake.mart.m", "lake.mart.h", "lake.raw.nope")
JOBS = ("reader", "keeper", "busy", "retired", "revived", "ghost")
KEYS = ("k0", "k1", "k2")


def _previous_function() -> str:
    """The function as migration 2026-11-24-2200 installs it (its frozen copy), renamed into `pg_temp`."""
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused/unused"))
    text = str(script.get_revision(_REQUEST_BY_REQUEST).module.ISSUE_BARRIERS)
    assert text.count("FUNCTION metaservice_issue_barriers(") == 1
    # Since migration 2026-11-27-0900 a repeated `next` (its job has a barrier in flight) records its reports like
    # a report and seals nothing; before, it recorded nothing. The reference gets the same rule.
    in_flight = (
        "                v_reqs[v_i] := v_req || jsonb_build_object('kind', 'report', 'roots', '{}'::jsonb);\n"
        "                CONTINUE;\n"
    )
    recorded = (
        "                v_reqs[v_i] := v_req || jsonb_build_object('kind', 'report');\n"
        "                UPDATE tables t SET latest_snapshot_id = r.snapshot_id, latest_snapshot_at = now(),\n"
        "                                    sealable = true, seal_candidate = true\n"
        "                  FROM (SELECT key AS name, value::bigint AS snapshot_id\n"
        "                          FROM jsonb_each_text(coalesce(v_req -> 'roots', '{}'::jsonb))) r\n"
        "                 WHERE t.name = r.name AND r.snapshot_id > coalesce(t.latest_snapshot_id, -1);\n"
        "                CONTINUE;\n"
    )
    assert text.count(in_flight) == 1
    text = text.replace(in_flight, recorded)
    return text.replace("FUNCTION metaservice_issue_barriers(", "FUNCTION pg_temp.previous_issue_barriers(")


@pytest.fixture(name="lineage")
def fx_lineage(api: httpx.Client, database_url: str) -> Iterator[tuple[psycopg.Connection[Any], dict[str, int]]]:
    """The lineage every drawn batch meets; a connection with the previous function, and the tables' ids."""

    def ok(response: httpx.Response) -> httpx.Response:
        assert response.status_code < 300, response.text
        return response

    for name in ("a", "b"):
        ok(api.post(f"/register/source/reader/lake/raw/{name}"))
    ok(api.post("/register/source/busy/lake/raw/c"))
    ok(api.post("/register/source/retired/lake/raw/d"))
    ok(api.post("/unregister/retired"))
    ok(api.post("/register/source/keeper/lake/raw/o"))
    ok(api.post("/tables/lake/raw/o/snapshots", json={"snapshot_id": 5}))
    ok(api.post("/register/sink/leaver/lake/raw/o"))  # the writer makes o unsealable ...
    ok(api.delete("/register/sink/leaver/lake/raw/o"))  # ... and leaves it an orphan at snapshot 5
    ok(api.post("/register/sink/writer/lake/mart/m"))
    ok(api.post("/register/source/reader/lake/raw/e"))
    ok(api.delete("/register/source/reader/lake/raw/e"))  # reader no longer reads e
    ok(api.post("/register/source/revived/lake/raw/b"))
    ok(api.post("/unregister/revived"))
    ok(api.post("/register/source/revived/lake/raw/d"))  # back, reading another root
    ok(api.post("/register/sink/first/lake/mart/h"))
    ok(api.delete("/register/sink/first/lake/mart/h"))
    ok(api.post("/register/sink/second/lake/mart/h"))  # h handed over: a report names its new writer
    ok(api.post("/tables/lake/raw/a/snapshots", json={"snapshot_id": 5}))
    ok(api.post("/barriers", headers={"Idempotency-Key": "k0"}))
    busy = ok(api.post("/jobs/busy/barriers/next", json={"root_snapshots": {"lake.raw.c": 1}})).json()
    assert busy["action"] == "process", busy  # busy has a barrier in flight from now on
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(_previous_function())
        ids = dict(conn.execute("SELECT name, id FROM tables").fetchall())
        clock = conn.execute("SELECT last_barrier FROM barrier_clock").fetchone()
        assert clock is not None
        ids["<clock>"] = clock[0]  # an `unless_after` no barrier followed yet
        yield conn, ids


def _state(conn: psycopg.Connection[Any], start: int) -> dict[str, Any]:
    """What a call leaves behind, with the barriers it issued numbered in order."""
    issued = [b for (b,) in conn.execute("SELECT barrier FROM barriers WHERE barrier > %s ORDER BY barrier", [start])]
    order = {b: f"new{i}" for i, b in enumerate(issued)}

    def barrier(value: int | None) -> int | str | None:
        return order.get(value, value) if value is not None else None

    tables = conn.execute(
        "SELECT name, latest_snapshot_id, sealable, seal_candidate, latest_snapshot_at = now()"
        "  FROM tables ORDER BY name"
    ).fetchall()
    rows = conn.execute("SELECT table_id, first_barrier, last_barrier, snapshot_id, kind FROM snapshot_ranges")
    ranges = sorted(  # a seal inserts its ranges in no set order
        ((table_id, barrier(first), barrier(last), snapshot, kind) for table_id, first, last, snapshot, kind in rows),
        key=repr,
    )
    barriers = conn.execute(
        "SELECT issued_by, request_key FROM barriers WHERE barrier > %s ORDER BY barrier", [start]
    ).fetchall()
    clock = conn.execute("SELECT last_barrier FROM barrier_clock").fetchone()
    assert clock is not None
    return {"tables": tables, "ranges": ranges, "barriers": barriers, "clock": barrier(clock[0]), "order": order}


def _run(conn: psycopg.Connection[Any], function: str, batch: list[AllocationRequest]) -> dict[str, Any]:
    with conn.transaction(force_rollback=True):
        clock = conn.execute("SELECT last_barrier FROM barrier_clock").fetchone()
        assert clock is not None
        answers = conn.execute(f"SELECT {function}(%s)", [Jsonb([r.wire() for r in batch])]).fetchone()
        assert answers is not None
        state = _state(conn, clock[0])
    order = state.pop("order")
    for answer in answers[0]:
        answer["barrier"] = order.get(answer["barrier"], answer["barrier"])
        answer["issued_at"] = answer["issued_at"] is not None
        answer["wait_seconds"] = answer["wait_seconds"] is not None
    return {"answers": answers[0], **state}


def _requests(ids: dict[str, int]) -> st.SearchStrategy[AllocationRequest]:
    roots = st.dictionaries(st.sampled_from(NAMES), st.integers(min_value=3, max_value=7), max_size=3)
    plain = st.builds(
        AllocationRequest,
        kind=st.sampled_from(["barrier", "seal", "report"]),
        by=st.just("test"),
        key=st.none() | st.sampled_from(KEYS),
        roots=roots,
        when_unsealed=st.lists(st.sampled_from([ids[n] for n in ROOTS]), max_size=2),
        unless_after=st.none() | st.just(ids["<clock>"]),
    )
    job = st.builds(
        AllocationRequest,
        kind=st.just("seal"),
        by=st.just("job"),
        key=st.none() | st.sampled_from(KEYS),
        roots=roots,
        job=st.sampled_from(JOBS),
    )
    return plain | job


def test_every_batch_is_answered_and_recorded_as_the_request_by_request_function_did(
    lineage: tuple[psycopg.Connection[Any], dict[str, int]],
) -> None:
    conn, ids = lineage
    drawn: list[int] = []

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(batch=st.lists(_requests(ids), min_size=1, max_size=8))
    # A job's report equal to the orphan's newest snapshot does not make it sealable, beside a lower report that
    # touches the row.
    @example(
        batch=[
            AllocationRequest("report", by="test", roots={"lake.raw.o": 3}),
            AllocationRequest("seal", by="job", job="keeper", roots={"lake.raw.o": 5}),
        ]
    )
    # The lineage's changes: a dropped source, a revived job, a retired one, a table handed to another writer.
    @example(
        batch=[
            AllocationRequest("seal", by="job", job="reader", roots={"lake.raw.e": 4}),
            AllocationRequest("seal", by="job", job="revived", roots={"lake.raw.d": 4}),
            AllocationRequest("seal", by="job", job="retired", roots={"lake.raw.d": 5}),
            AllocationRequest("report", by="test", roots={"lake.mart.h": 4}),
        ]
    )
    # A repeated `next` (its job has a barrier in flight) is accepted but does not claim its key for the batch.
    @example(
        batch=[
            AllocationRequest("seal", by="job", job="busy", key="k1", roots={"lake.raw.c": 4}),
            AllocationRequest("barrier", by="test", key="k1"),
        ]
    )
    def check(batch: list[AllocationRequest]) -> None:
        before = _run(conn, "pg_temp.previous_issue_barriers", batch)
        after = _run(conn, "metaservice_issue_barriers", batch)
        assert after == before
        drawn.append(sum(1 for a in before["answers"] if a["error"] is None and a["barrier"] is not None))
        seen.update(json.dumps(a["error"], sort_keys=True) for a in before["answers"] if a["error"] is not None)

    seen: set[str] = set()
    check()
    assert sum(drawn) > 0  # batches that issued barriers were among those compared
    refusals = [json.loads(e) for e in seen]
    assert {"code": "not_source", "job": "reader", "tables": ["lake.raw.e"]} in refusals
    assert {"code": "not_root", "writers": {"lake.mart.h": "second"}} in refusals
    assert {"code": "job_inactive", "job": "retired"} in refusals
