"""Roots one ingestion writes together are sealed together, over HTTP against the real server.

The trap: an ingestion appends events, then users; `sessionize`, reading both, calls `next` in between and
reports the events it sees in storage; a barrier sealed the new events with the old users, and a consistent read
paired them. With the two roots declared a group, a job's report of one of them records nothing, and a report
naming a part of the group is refused: every barrier seals the group's snapshots of one ingestion step.
"""

from __future__ import annotations

import httpx

from tests.support import assert_problem, table_path
from tests.support.pipelines import Flow

EVENTS, USERS, SESSIONS, OTHER = "lake.raw.events", "lake.raw.users", "lake.mart.sessions", "lake.raw.other"


def barriers(api: httpx.Client) -> list[int]:
    return [b["barrier"] for b in api.get("/barriers", params={"limit": 1000}).json()["barriers"]]


def test_a_jobs_report_of_one_root_of_a_group_seals_nothing_and_the_group_is_sealed_whole(api: httpx.Client) -> None:
    flow = Flow(api)
    flow.register("sessionize", sources=[EVENTS, USERS], sinks=[SESSIONS])
    declared = api.put("/root-groups/ingest", json={"tables": [USERS, EVENTS]})
    assert declared.status_code == 200, declared.text
    assert declared.json() == {"group": "ingest", "tables": [EVENTS, USERS]}
    b1 = api.post("/barriers", json={"root_snapshots": {EVENTS: 1, USERS: 1}}).json()
    assert b1["sealed"] == {EVENTS: 1, USERS: 1}
    flow.run("sessionize", {SESSIONS: 1})

    # the ingestion appended events@2, not users yet; the job sees events@2 in storage and reports it
    decision = flow.next("sessionize", {EVENTS: 2, USERS: 1})
    assert decision["action"] == "idle", decision  # nothing new: events@2 alone is no barrier's data
    assert barriers(api) == [b1["barrier"]]
    assert api.get(f"/tables/{table_path(EVENTS)}").json()["latest_snapshot_id"] == 1

    before = barriers(api)
    part = api.post("/barriers", json={"root_snapshots": {EVENTS: 2}})
    problem = assert_problem(part, 409, "partial_root_group", names=("ingest", USERS))
    assert problem["missing"] == [USERS]
    assert_problem(
        api.post(f"/tables/{table_path(EVENTS)}/snapshots", json={"snapshot_id": 2}), 409, "partial_root_group"
    )
    assert barriers(api) == before and api.get(f"/tables/{table_path(EVENTS)}").json()["latest_snapshot_id"] == 1

    whole = api.post("/barriers", json={"root_snapshots": {EVENTS: 2, USERS: 2}}).json()
    assert whole["sealed"] == {EVENTS: 2, USERS: 2}
    decision = flow.process("sessionize")
    assert decision["barrier"] == whole["barrier"]
    assert {t: i["snapshot_id"] for t, i in decision["inputs"].items()} == {EVENTS: 2, USERS: 2}


def test_a_root_outside_any_group_is_still_sealed_by_its_readers_report(api: httpx.Client) -> None:
    flow = Flow(api)
    flow.register("copy", sources=[OTHER], sinks=[SESSIONS])
    flow.report(OTHER, 1)
    flow.issue()
    flow.run("copy", {SESSIONS: 1})
    decision = flow.next("copy", {OTHER: 2})
    assert decision["action"] == "process" and decision["inputs"][OTHER]["snapshot_id"] == 2


def test_only_roots_form_groups_and_a_root_is_in_one_group(api: httpx.Client) -> None:
    Flow(api).register("sessionize", sources=[EVENTS], sinks=[SESSIONS])
    written = api.put("/root-groups/ingest", json={"tables": [EVENTS, SESSIONS]})
    assert assert_problem(written, 409, "root_group_conflict", names=(SESSIONS,))["writer"] == "sessionize"
    assert api.get("/root-groups").json() == {"groups": []}

    assert api.put("/root-groups/a", json={"tables": [EVENTS, USERS]}).status_code == 200
    taken = assert_problem(api.put("/root-groups/b", json={"tables": [USERS]}), 409, "root_group_conflict")
    assert taken["root_group"] == "a"
    assert api.put("/root-groups/a", json={"tables": [EVENTS]}).json()["tables"] == [EVENTS]  # users leaves a
    assert api.put("/root-groups/b", json={"tables": [USERS]}).status_code == 200
    assert api.get("/root-groups").json() == {
        "groups": [{"group": "a", "tables": [EVENTS]}, {"group": "b", "tables": [USERS]}]
    }
