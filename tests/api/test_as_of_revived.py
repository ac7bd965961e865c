"""A past view shows what was true then: `GET /lineage?as_of=<barrier>` includes the edges of a job that came back
and settled that barrier, over HTTP against the real server.

A revived job (unregistered, then registered again) may settle barriers issued before its new edges were added:
the writer of a table with history starts after it, so it processes the barriers it missed. Its snapshot lineage
shows it produced them, and the graph as of those barriers must show it too.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.support import table_path
from tests.support.pipelines import Flow

R, X = "lake.raw.r", "lake.mart.x"


def edges_as_of(api: httpx.Client, barrier: int) -> set[tuple[str, str]]:
    body: dict[str, Any] = api.get("/lineage", params={"as_of": barrier}).json()
    return {(e["from"], e["to"]) for e in body["edges"]}


def test_a_revived_jobs_edges_are_in_the_graph_as_of_the_barriers_it_settled_after_coming_back(
    api: httpx.Client,
) -> None:
    flow = Flow(api)
    flow.register("J", sources=[R], sinks=[X])
    flow.report(R, 1)
    b1 = flow.issue()
    flow.run("J", {X: 10})
    flow.unregister("J")
    flow.report(R, 2)
    b2 = flow.issue()  # J is gone: X settles nothing here
    assert edges_as_of(api, b2) == set()

    flow.register("J", sources=[R], sinks=[X])  # back, after b2 was issued
    settled = flow.run("J", {X: 11})
    assert settled == b2  # it catches up on the barrier it missed
    produced = api.get(f"/tables/{table_path(X)}/snapshots/11/lineage").json()
    assert produced["job"] == "J" and produced["barrier"] == b2

    assert edges_as_of(api, b2) == {(f"table:{R}", "job:J"), ("job:J", f"table:{X}")}
    assert edges_as_of(api, b1) == {(f"table:{R}", "job:J"), ("job:J", f"table:{X}")}


def test_a_past_time_shows_only_the_completions_made_by_then(api: httpx.Client) -> None:
    flow = Flow(api)
    flow.register("J", sources=[R], sinks=[X])
    flow.report(R, 1)
    b1 = flow.issue()
    flow.run("J", {X: 10})
    flow.report(R, 2)
    issued = api.post("/barriers").json()
    then = issued["issued_at"]  # b2 is issued; J completes it only afterwards
    assert flow.run("J", {X: 11}) == issued["barrier"]

    nodes = {n["id"]: n for n in api.get("/lineage", params={"as_of": then}).json()["nodes"]}
    assert nodes[f"table:{R}"]["newest_complete_barrier"] == issued["barrier"]  # sealed by b2 itself
    assert nodes[f"table:{X}"]["newest_complete_barrier"] == b1  # J's completion of b2 came later
    assert nodes[f"table:{X}"]["newest_complete_snapshot_id"] == 10
    now = {n["id"]: n for n in api.get("/lineage").json()["nodes"]}
    assert now[f"table:{X}"]["newest_complete_barrier"] == issued["barrier"]
