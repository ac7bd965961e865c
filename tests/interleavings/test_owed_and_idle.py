"""Nothing waits for outside help (docs/design.md rules 5 and 12).

- An idle job never holds reads back: a job whose inputs did not change completes those barriers for a reader
  (strong and weak reads, at any depth of the lineage), without polling.
- Data the protocol owes a job is offered by its next `next`: after an abort, or after the job was unregistered
  during its write and registered again, with no new root data and no barrier issued by hand.
- A read that no barrier can answer yet names the tables, and the writers, that hold it back.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.interleavings.harness import Servers


@pytest.fixture(name="api")
def fx_api(servers: Servers) -> httpx.Client:
    """Server A of the pair: no background refresh completes barriers for these tests."""
    return servers.a


def path(table: str) -> str:
    return table.replace(".", "/")


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, f"{response.request.method} {response.request.url}: {response.text}"
    return response.json()


def register(api: httpx.Client, job: str, sources: list[str], sinks: list[str]) -> None:
    for table in sources:
        ok(api.post(f"/register/source/{job}/{path(table)}"), 201)
    for table in sinks:
        ok(api.post(f"/register/sink/{job}/{path(table)}"), 201)


def process(api: httpx.Client, job: str, roots: dict[str, int] | None = None) -> dict[str, Any]:
    decision: dict[str, Any] = ok(api.post(f"/jobs/{job}/barriers/next", json={"root_snapshots": roots or {}}))
    assert decision["action"] == "process", decision
    return decision


def commit(api: httpx.Client, job: str, barrier: int, outputs: dict[str, int]) -> None:
    ok(api.post(f"/jobs/{job}/barriers/{barrier}/commit", json={"snapshots": outputs}))


def strong(api: httpx.Client, tables: list[str]) -> dict[str, Any]:
    answer: dict[str, Any] = ok(api.post("/versions", json={"tables": tables, "consistency": "strong"}))
    return answer


def job_last(api: httpx.Client, job: str) -> int | None:
    last: int | None = ok(api.get(f"/jobs/{job}"))["last_barrier"]
    return last


# --- an idle job never holds reads back ------------------------------------------------------------------------


def test_an_idle_job_that_does_not_poll_does_not_hold_strong_reads_of_its_component_back(api: httpx.Client) -> None:
    r, s, a, b = "lake.raw.r", "lake.raw.s", "lake.mid.a", "lake.mid.b"
    register(api, "J1", [r], [a])
    register(api, "J2", [r, s], [b])
    b1 = ok(api.post("/barriers", json={"root_snapshots": {r: 1, s: 1}}), 201)["barrier"]
    commit(api, "J1", process(api, "J1")["barrier"], {a: 10})
    commit(api, "J2", process(api, "J2")["barrier"], {b: 20})
    b2 = ok(api.post("/barriers", json={"root_snapshots": {s: 2}}), 201)["barrier"]  # only s changes
    decision = process(api, "J2")
    assert decision["barrier"] == b2
    commit(api, "J2", b2, {b: 21})
    assert job_last(api, "J1") == b1  # J1, like a daily job, does not poll

    assert strong(api, [b]) == {"consistency": "strong", "barrier": b2, "versions": {b: 21}}
    assert ok(api.get(f"/version/strong/{path(b)}"))["barrier"] == b2
    assert strong(api, [a, b]) == {"consistency": "strong", "barrier": b2, "versions": {a: 10, b: 21}}
    # a's content at b2 is its content at b1: completed idle for the reader, not skipped or invented
    assert ok(api.get(f"/barriers/{b2}"))["tables"][a] == {"state": "complete", "snapshot_id": 10}
    assert job_last(api, "J1") == b2
    # and J1's own `next` finds nothing to do
    assert ok(api.post("/jobs/J1/barriers/next"))["action"] == "idle"


def test_a_chain_of_three_idle_jobs_completes_for_weak_and_strong_reads(api: httpx.Client) -> None:
    r, s, a, b, c, d = "lake.raw.r", "lake.raw.s", "lake.l1.a", "lake.l2.b", "lake.l3.c", "lake.mart.d"
    register(api, "J1", [r], [a])
    register(api, "J2", [a], [b])
    register(api, "J3", [b], [c])
    register(api, "J4", [r, s], [d])  # one component through r
    ok(api.post("/barriers", json={"root_snapshots": {r: 1, s: 1}}), 201)
    for job, sink, snapshot in (("J1", a, 10), ("J2", b, 20), ("J3", c, 30), ("J4", d, 40)):
        commit(api, job, process(api, job)["barrier"], {sink: snapshot})
    b2 = ok(api.post("/barriers", json={"root_snapshots": {s: 2}}), 201)["barrier"]
    ok(api.post("/barriers"), 201)  # and one more barrier with nothing new at all
    b3 = ok(api.post("/barriers"), 201)["barrier"]
    commit(api, "J4", process(api, "J4")["barrier"], {d: 41})  # J4 processes b2, then completes b3 idle below
    assert ok(api.post("/jobs/J4/barriers/next"))["action"] == "idle"

    weak = ok(api.post("/versions", json={"tables": [c], "consistency": "weak"}))
    assert weak == {"consistency": "weak", "barrier": b3, "versions": {c: 30}}
    assert strong(api, [d]) == {"consistency": "strong", "barrier": b3, "versions": {d: 41}}
    assert strong(api, [r, c, d])["versions"] == {r: 1, c: 30, d: 41}
    assert all(job_last(api, job) == b3 for job in ("J1", "J2", "J3"))
    del b2


def test_an_idle_writer_whose_input_changed_is_not_completed_for_a_reader(api: httpx.Client) -> None:
    r, a = "lake.raw.r", "lake.mid.a"
    register(api, "J1", [r], [a])
    b1 = ok(api.post("/barriers", json={"root_snapshots": {r: 1}}), 201)["barrier"]
    commit(api, "J1", process(api, "J1")["barrier"], {a: 10})
    ok(api.post("/barriers", json={"root_snapshots": {r: 2}}), 201)  # r changed: J1 has work to do
    assert strong(api, [a]) == {"consistency": "strong", "barrier": b1, "versions": {a: 10}}
    assert job_last(api, "J1") == b1


def test_the_delay_of_an_idle_table_counts_from_the_barriers_it_completed_without_work(api: httpx.Client) -> None:
    r, s, a, b = "lake.raw.r", "lake.raw.s", "lake.mid.a", "lake.mid.b"
    register(api, "J1", [r], [a])
    register(api, "J2", [s], [b])
    ok(api.post("/barriers", json={"root_snapshots": {r: 1, s: 1}}), 201)
    commit(api, "J1", process(api, "J1")["barrier"], {a: 10})
    commit(api, "J2", process(api, "J2")["barrier"], {b: 20})
    b2 = ok(api.post("/barriers", json={"root_snapshots": {s: 2}}), 201)["barrier"]
    commit(api, "J2", process(api, "J2")["barrier"], {b: 21})
    delay = ok(api.get(f"/tables/{path(a)}/delay"))
    assert delay["barrier"] == b2, delay  # J1 had no new input at b2: its table is as fresh as b2
    delays = {d["table"]: d for d in ok(api.get("/delays"))["delays"]}
    assert delays[a]["barrier"] == b2, delays[a]


# --- owed data is offered without outside help -------------------------------------------------------------------


def test_after_an_abort_the_next_next_offers_the_owed_rows_without_new_data_or_a_manual_barrier(
    api: httpx.Client,
) -> None:
    r, x, y = "lake.raw.r", "lake.mid.x", "lake.mart.y"
    register(api, "J", [r], [x])
    register(api, "K", [x], [y])
    commit(api, "J", process(api, "J", {r: 1})["barrier"], {x: 10})
    commit(api, "K", process(api, "K")["barrier"], {y: 100})
    aborted = process(api, "J", {r: 2})
    ok(api.post(f"/jobs/J/barriers/{aborted['barrier']}/abort", json={"reason": "permanent failure"}))
    assert ok(api.post("/jobs/K/barriers/next"))["action"] == "idle"  # K skips the aborted barrier

    again = process(api, "J")  # no root report, no POST /barriers
    assert again["barrier"] > aborted["barrier"]
    assert again["inputs"] == {r: {"snapshot_id": 2, "previous_snapshot_id": 1}}
    commit(api, "J", again["barrier"], {x: 11})
    downstream = process(api, "K")
    assert downstream["barrier"] == again["barrier"] and downstream["inputs"][x]["snapshot_id"] == 11


def test_a_job_unregistered_during_its_write_and_registered_again_processes_the_owed_rows(api: httpx.Client) -> None:
    r, x = "lake.raw.r", "lake.mid.x"
    register(api, "J", [r], [x])
    commit(api, "J", process(api, "J", {r: 1})["barrier"], {x: 10})
    in_flight = process(api, "J", {r: 2})
    ok(api.post("/unregister/J"))  # aborts the barrier in flight (rule 7)
    ok(api.post(f"/register/source/J/{path(r)}"), 201)
    ok(api.post(f"/register/sink/J/{path(x)}"), 201)

    again = process(api, "J")
    assert again["barrier"] > in_flight["barrier"]
    assert again["inputs"] == {r: {"snapshot_id": 2, "previous_snapshot_id": 1}}
    changes = ok(api.get("/lineage/changes"))["changes"]
    assert all(c["effective_barrier"] is not None for c in changes), changes


def test_an_ingestion_step_that_gave_its_barrier_up_gets_a_new_one(api: httpx.Client) -> None:
    x = "lake.raw.ingested"
    ok(api.post(f"/register/sink/ingest/{path(x)}"), 201)
    first = ok(api.post("/barriers"), 201)["barrier"]
    decision = process(api, "ingest")
    assert decision["barrier"] == first
    ok(api.post(f"/jobs/ingest/barriers/{first}/abort"))
    again = process(api, "ingest")
    assert again["barrier"] > first


# --- what holds a read back is named ------------------------------------------------------------------------------


def test_a_job_registered_but_never_run_is_named_by_the_read_it_holds_back(api: httpx.Client) -> None:
    r, a = "lake.raw.r", "lake.mid.a"
    register(api, "never_ran", [r], [a])
    ok(api.post("/barriers", json={"root_snapshots": {r: 1}}), 201)
    answer = api.post("/versions", json={"tables": [r], "consistency": "strong"})
    assert answer.status_code == 404, answer.text
    problem = answer.json()
    assert problem["code"] == "no_consistent_version"
    assert problem["held_back_by"] == [{"table": a, "writer": "never_ran"}]
    assert "never_ran" in problem["detail"] and a in problem["detail"]
    # the delays name it too: its table leads the list, with the job that has to run as its bottleneck
    delays = ok(api.get("/delays"))["delays"]
    assert (delays[0]["table"], delays[0]["barrier"], delays[0]["bottleneck_job"]) == (a, None, "never_ran")
    assert ok(api.get(f"/tables/{path(a)}/delay"))["bottleneck_job"] == "never_ran"


def test_a_root_reported_by_a_replayed_next_is_recorded_and_sealed_after_the_barrier_in_flight(
    api: httpx.Client,
) -> None:
    r, x = "lake.raw.r", "lake.mid.x"
    register(api, "J", [r], [x])
    first = process(api, "J", {r: 1})  # ... and the job crashes before its commit
    replayed = process(api, "J", {r: 2})  # the retry sees r = 2 in storage
    assert (replayed["barrier"], replayed["inputs"]) == (first["barrier"], first["inputs"])  # replay is exact
    assert ok(api.get(f"/tables/{path(r)}"))["latest_snapshot_id"] == 2  # recorded, not dropped
    commit(api, "J", first["barrier"], {x: 10})
    following = process(api, "J")  # no report now: the recorded snapshot is sealed for it
    assert following["barrier"] > first["barrier"]
    assert following["inputs"] == {r: {"snapshot_id": 2, "previous_snapshot_id": 1}}
