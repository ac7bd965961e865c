"""A plan assembled from several fetches is decided as of one head (docs/design.md, "One head per plan").

The sequence that broke consistent reads: diamond r1 → J1 → a, r1 → J2 → b, (a, b) → J3 → c. J3's `next` fetches
J1, then J2, to settle them (each its own statement). A seal of r1 = 2 at a new barrier b4, sent by another client
to the other server process between the two fetches, moved the plan's head to b4 while the plan still held r1's
open range as the first fetch read it: J1 was settled idle at b4 with a built from r1 = 1, and r1 = 2 was never
processed at b4. Here the interleaving is exact: the plan pauses after its first fetch (`plan_fetched`).
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.interleavings.harness import Servers, ok, path

R1, A, B, C = "lake.raw.r1", "lake.mid.a", "lake.mid.b", "lake.mart.c"


def _register(api: httpx.Client, job: str, sources: list[str], sinks: list[str]) -> None:
    for table in sources:
        ok(api.post(f"/register/source/{job}/{path(table)}"), 201)
    for table in sinks:
        ok(api.post(f"/register/sink/{job}/{path(table)}"), 201)


def _process_and_commit(api: httpx.Client, job: str, outputs: dict[str, int]) -> dict[str, Any]:
    decision: dict[str, Any] = ok(api.post(f"/jobs/{job}/barriers/next"))
    assert decision["action"] == "process", decision
    ok(api.post(f"/jobs/{job}/barriers/{decision['barrier']}/commit", json={"snapshots": outputs}))
    return decision


def test_a_seal_between_two_fetches_of_one_plan_is_not_mixed_into_it(servers: Servers) -> None:
    a, b = servers.a, servers.b
    _register(a, "J1", [R1], [A])
    _register(a, "J2", [R1], [B])
    _register(a, "J3", [A, B], [C])
    b1 = ok(a.post("/barriers", json={"root_snapshots": {R1: 1}}), 201)["barrier"]
    assert _process_and_commit(a, "J1", {A: 10})["barrier"] == b1
    assert _process_and_commit(a, "J2", {B: 20})["barrier"] == b1
    assert _process_and_commit(a, "J3", {C: 30})["barrier"] == b1
    ok(a.post("/barriers"), 201)  # b2 and b3: nothing new; J1 and J2 are not asked (idle, lagging)
    b3 = ok(a.post("/barriers"), 201)["barrier"]

    servers.pause.arm("plan_fetched")
    j3 = servers.in_background(lambda: a.post("/jobs/J3/barriers/next"))
    servers.pause.wait_arrived("plan_fetched")  # J3's plan fetched J1 and holds r1's open range as of b3
    b4 = ok(b.post("/barriers", json={"root_snapshots": {R1: 2}}), 201)["barrier"]  # the other process seals r1=2
    servers.pause.release("plan_fetched")
    answer = ok(j3.result())
    assert answer["action"] in ("idle", "wait"), answer

    # a was built from r1 = 1: it must not be recorded at b4, where r1 = 2 is sealed.
    at_b4 = ok(b.get(f"/barriers/{b4}"))
    assert at_b4["tables"][A]["snapshot_id"] is None, at_b4["tables"][A]
    weak = ok(b.post("/versions", json={"tables": [R1, A], "consistency": "weak"}))
    assert weak == {"consistency": "weak", "barrier": b3, "versions": {R1: 1, A: 10}}, weak

    # r1 = 2 is processed at b4, by both of its readers.
    for job, sink, snapshot in (("J1", A, 11), ("J2", B, 21)):
        decision = _process_and_commit(b, job, {sink: snapshot})
        assert decision["barrier"] == b4 and decision["inputs"] == {
            R1: {"snapshot_id": 2, "previous_snapshot_id": 1}
        }, decision
    decision = _process_and_commit(a, "J3", {C: 31})
    assert decision["barrier"] == b4
    assert {t: i["snapshot_id"] for t, i in decision["inputs"].items()} == {A: 11, B: 21}
    strong = ok(a.post("/versions", json={"tables": [R1, C], "consistency": "strong"}))
    assert strong == {"consistency": "strong", "barrier": b4, "versions": {R1: 2, C: 31}}, strong
