"""Snapshot lineage (issue 17): the run that produced a snapshot and the input snapshots it read, recursively,
over HTTP against the real server. A three-job chain whose middle writer hands its table over and whose first job
is retired and revived: every snapshot keeps the producer that really committed it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import table_path
from tests.support.pipelines import (
    Flow,
)

R, A, B, C = "lake.raw.r", "lake.mart.a", "lake.mart.b", "lake.mart.c"


def lineage(api: httpx.Client, table: str, snapshot_id: int | str, **params: Any) -> httpx.Response:
    return api.get(f"/tables/{table_path(table)}/snapshots/{snapshot_id}/lineage", params=params)


def chain(entry: dict[str, Any]) -> list[tuple[str, int, str | None]]:
    """(table, snapshot, job) down a chain of single inputs."""
    out = []
    while True:
        out.append((entry["table"], entry["snapshot_id"], entry["job"]))
        if not entry["inputs"]:
            return out
        assert len(entry["inputs"]) == 1
        entry = entry["inputs"][0]


@pytest.fixture(name="history")
def fx_history(api: httpx.Client) -> dict[str, int]:
    """Three barriers through r → j1 → a → j2 → b → j3 → c: the second after b was handed from j2 to j2b, the third
    after j1 was unregistered and registered again."""
    flow = Flow(api)
    flow.register("j1", sources=[R], sinks=[A])
    flow.register("j2", sources=[A], sinks=[B])
    flow.register("j3", sources=[B], sinks=[C])
    flow.report(R, 1)
    b1 = flow.issue()
    assert flow.run("j1", {A: 10}) == b1
    assert flow.run("j2", {B: 20}) == b1
    assert flow.run("j3", {C: 30}) == b1

    api.delete(f"/register/sink/j2/{table_path(B)}").raise_for_status()
    flow.register("j2b", sources=[A], sinks=[B])
    flow.report(R, 2)
    b2 = flow.issue()
    assert flow.run("j1", {A: 11}) == b2
    assert flow.run("j2b", {B: 21}) == b2
    assert flow.run("j3", {C: 31}) == b2

    flow.unregister("j1")
    flow.register("j1", sources=[R], sinks=[A])
    flow.report(R, 3)
    b3 = flow.issue()
    assert flow.run("j1", {A: 12}) >= b3
    b3 = flow.run("j2b", {B: 22})
    assert flow.run("j3", {C: 32}) == b3
    return {"b1": b1, "b2": b2, "b3": b3}


def test_a_snapshot_leads_through_every_run_to_the_root(api: httpx.Client, history: dict[str, int]) -> None:
    answer = lineage(api, C, 30)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert chain(body) == [(C, 30, "j3"), (B, 20, "j2"), (A, 10, "j1"), (R, 1, None)]
    assert body["barrier"] == history["b1"] and body["truncated"] is False
    assert body["started_at"] is not None and body["finished_at"] >= body["started_at"]
    root = body["inputs"][0]["inputs"][0]["inputs"][0]
    assert root == {
        "table": R,
        "snapshot_id": 1,
        "job": None,
        "barrier": history["b1"],  # the barrier that sealed it
        "started_at": None,
        "finished_at": None,
        "inputs": [],
        "truncated": False,
    }


def test_a_hand_over_and_a_revival_keep_each_snapshot_with_its_producer(
    api: httpx.Client, history: dict[str, int]
) -> None:
    after_hand_over = lineage(api, C, 31).json()
    assert chain(after_hand_over) == [(C, 31, "j3"), (B, 21, "j2b"), (A, 11, "j1"), (R, 2, None)]
    assert after_hand_over["inputs"][0]["barrier"] == history["b2"]
    after_revival = lineage(api, C, 32).json()
    assert chain(after_revival) == [(C, 32, "j3"), (B, 22, "j2b"), (A, 12, "j1"), (R, 3, None)]
    # the snapshot the first writer committed still names it, though it writes nothing now
    assert chain(lineage(api, B, 20).json())[0] == (B, 20, "j2")


@pytest.mark.usefixtures("history")
def test_depth_cuts_the_tree_and_says_so(api: httpx.Client) -> None:
    body = lineage(api, C, 32, depth=1).json()
    assert [(e["table"], e["snapshot_id"]) for e in body["inputs"]] == [(B, 22)]
    assert body["inputs"][0]["inputs"] == [] and body["inputs"][0]["truncated"] is True
    assert body["truncated"] is True
    whole = lineage(api, C, 32, depth=3).json()
    assert whole["truncated"] is False and chain(whole)[-1] == (R, 3, None)
    assert lineage(api, C, 32, depth=0).json()["inputs"] == []


def test_a_root_snapshot_has_no_job_and_a_reported_one_no_barrier_yet(
    api: httpx.Client, history: dict[str, int]
) -> None:
    sealed = lineage(api, R, 2).json()
    assert (sealed["job"], sealed["barrier"], sealed["inputs"]) == (None, history["b2"], [])
    Flow(api).report(R, 4)  # known, not sealed by any barrier yet
    reported = lineage(api, R, 4).json()
    assert (reported["job"], reported["barrier"], reported["inputs"]) == (None, None, [])


@pytest.mark.usefixtures("history")
def test_unknown_tables_snapshots_and_bad_parameters_are_problems(api: httpx.Client) -> None:
    before = api.get("/tables").json()
    cases: list[tuple[str, int | str, dict[str, int], int]] = [
        ("lake.mart.nope", 1, {}, 404),
        (C, 999, {}, 404),
        (C, 29, {}, 404),
        (C, "abc", {}, 422),
        (C, "+30", {}, 422),
        (C, 30, {"depth": 51}, 422),
        (C, 30, {"depth": -1}, 422),
    ]
    for table, snapshot, params, status in cases:
        answer = lineage(api, table, snapshot, **params)
        assert answer.status_code == status, (table, snapshot, params, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["code"] in ("not_found", "invalid_request", "validation_error")
    assert api.get("/tables").json() == before
