"""The FLIP-276 protocol over HTTP on the diamond pipeline of PRODUCT.md (guarantees 1-6).

orders ──► enrich ──► orders_enriched ──┐
   └─────► audit  ──► order_audit       ├──► revenue ──► revenue_by_day
customers ► dims ───► customer_dim ─────┘
"""

from __future__ import annotations

import httpx
import pytest

from tests.support import table_path
from tests.support.pipelines import (
    AUDIT,
    CUSTOMERS,
    DIM,
    ENRICHED,
    ORDERS,
    REVENUE,
    Pipeline,
)


@pytest.fixture(name="pipeline")
def fx_pipeline(api: httpx.Client) -> Pipeline:
    pipeline = Pipeline(api)
    pipeline.register()
    return pipeline


def test_same_root_snapshot_gets_the_same_barrier_for_two_jobs(pipeline: Pipeline) -> None:
    first = pipeline.next("enrich", orders=1)
    second = pipeline.next("audit", orders=1)
    assert first["action"] == second["action"] == "process"
    assert first["barrier"] == second["barrier"]
    assert first["inputs"] == second["inputs"] == {ORDERS: {"snapshot_id": 1, "previous_snapshot_id": None}}
    assert len(pipeline.api.get("/barriers").json()["barriers"]) == 1


def test_post_barriers_with_a_repeated_idempotency_key_returns_the_first_answer(pipeline: Pipeline) -> None:
    api = pipeline.api
    key = {"Idempotency-Key": "9b1f0c4e-orchestrator-run-1"}
    first = api.post("/barriers", json={"root_snapshots": {ORDERS: 3, CUSTOMERS: 7}}, headers=key)
    assert first.status_code == 201, first.text
    assert first.json()["sealed"] == {ORDERS: 3, CUSTOMERS: 7}
    # the repeat (even with newer snapshots) changes nothing and answers exactly what the first call did
    repeat = api.post("/barriers", json={"root_snapshots": {ORDERS: 4}}, headers=key)
    assert repeat.status_code == 201 and repeat.json() == first.json()
    assert [b["barrier"] for b in api.get("/barriers").json()["barriers"]] == [first.json()["barrier"]]
    other = api.post("/barriers", json={}, headers={"Idempotency-Key": "another-call"})
    assert other.status_code == 201 and other.json()["barrier"] > first.json()["barrier"]
    assert other.json()["sealed"] == {}


def test_barrier_is_reoffered_with_the_same_inputs_until_committed(pipeline: Pipeline) -> None:
    first = pipeline.next("enrich", orders=1)
    again = pipeline.next("enrich", orders=2)  # a newer root snapshot does not change the barrier in flight
    assert again == first
    # the newer root snapshot is recorded (a report is never dropped) but sealed at no barrier meanwhile
    assert pipeline.api.get(f"/tables/{table_path(ORDERS)}").json()["latest_snapshot_id"] == 2
    assert [b["barrier"] for b in pipeline.api.get("/barriers").json()["barriers"]] == [first["barrier"]]
    assert pipeline.commit("enrich", first["barrier"], **{ENRICHED: 0}).status_code == 200
    following = pipeline.next("enrich", orders=2)
    assert following["action"] == "process" and following["barrier"] > first["barrier"]
    assert following["inputs"] == {ORDERS: {"snapshot_id": 2, "previous_snapshot_id": 1}}


def test_job_joining_two_tables_reads_both_at_one_barrier_while_writers_progress_unevenly(
    pipeline: Pipeline,
) -> None:
    t1 = pipeline.run("enrich", orders=1, customers=1)["barrier"]
    assert pipeline.run("dims")["barrier"] == t1
    joined = pipeline.run("revenue")
    assert joined["barrier"] == t1
    assert joined["inputs"] == {
        ENRICHED: {"snapshot_id": 0, "previous_snapshot_id": None},
        DIM: {"snapshot_id": 0, "previous_snapshot_id": None},
    }

    t2 = pipeline.next("enrich", orders=2)["barrier"]  # orders move on; dims does not run again
    waiting = pipeline.next("revenue")
    assert waiting == {**waiting, "action": "wait", "barrier": t2}  # enrich is still processing t2
    assert pipeline.commit("enrich", t2, **{ENRICHED: 1}).status_code == 200

    joined = pipeline.run("revenue")  # customers did not change: MetaService completes t2 for dims unasked
    assert pipeline.api.get(f"/tables/{table_path(DIM)}").json()["newest_complete_barrier"] == t2
    assert pipeline.api.get("/jobs/dims/barriers").json()["runs"][0]["status"] == "idle"
    assert joined["barrier"] == t2
    assert joined["inputs"] == {
        ENRICHED: {"snapshot_id": 1, "previous_snapshot_id": 0},
        DIM: {"snapshot_id": 0, "previous_snapshot_id": 0},
    }


def test_weak_is_freshest_per_query_and_strong_covers_the_component_without_going_back(
    pipeline: Pipeline,
) -> None:
    t1 = pipeline.run("enrich", orders=1, customers=1)["barrier"]
    pipeline.run("dims")
    pipeline.run("audit")
    pipeline.run("revenue")
    strong_seen = []

    def strong(tables: list[str]) -> int:
        response = pipeline.versions(tables, "strong")
        assert response.status_code == 200, response.text
        strong_seen.append(response.json()["barrier"])
        return int(response.json()["barrier"])

    assert strong([ENRICHED]) == strong([REVENUE]) == t1
    t2 = pipeline.run("enrich", orders=2)["barrier"]
    weak = pipeline.versions([ENRICHED], "weak").json()
    assert weak == {"consistency": "weak", "barrier": t2, "versions": {ENRICHED: 1}}
    # strong waits for the whole component (dims, audit and revenue have not completed t2 yet)
    assert strong([ENRICHED]) == t1
    assert strong([AUDIT]) == t1  # another table of the same pipeline gets the same barrier
    # dims read nothing new at t2: it completes t2 idle for the reader, unasked (rule 12)
    assert pipeline.versions([ENRICHED, DIM], "weak").json()["barrier"] == t2

    pipeline.run("dims")
    pipeline.run("audit")
    assert strong([ENRICHED]) == t1  # revenue still behind
    pipeline.run("revenue")
    result = pipeline.versions([ENRICHED, REVENUE, DIM], "strong").json()
    assert result == {"consistency": "strong", "barrier": t2, "versions": {ENRICHED: 1, REVENUE: 1, DIM: 0}}
    assert strong_seen == sorted(strong_seen)
    single = pipeline.api.get(f"/version/strong/{table_path(REVENUE)}").json()
    assert single == {"table": REVENUE, "consistency": "strong", "barrier": t2, "snapshot_id": 1}


def test_commit_is_exactly_once(pipeline: Pipeline) -> None:
    barrier = pipeline.next("enrich", orders=1)["barrier"]
    first = pipeline.commit("enrich", barrier, **{ENRICHED: 5})
    assert first.status_code == 200
    assert first.json() == {
        "job_id": "enrich",
        "barrier": barrier,
        "status": "committed",
        "snapshots": {ENRICHED: 5},
    }
    assert pipeline.commit("enrich", barrier, **{ENRICHED: 5}).json() == first.json()
    conflict = pipeline.commit("enrich", barrier, **{ENRICHED: 6})
    assert conflict.status_code == 409 and conflict.json()["code"] == "snapshot_conflict"
    ranges = pipeline.api.get(f"/tables/{table_path(ENRICHED)}/barriers").json()["ranges"]
    assert ranges == [{"first_barrier": barrier, "last_barrier": barrier, "snapshot_id": 5, "how": "committed"}]


def test_abort_makes_downstream_jobs_skip_the_barrier(pipeline: Pipeline) -> None:
    t1 = pipeline.run("enrich", orders=1, customers=1)["barrier"]
    pipeline.run("dims")
    pipeline.run("revenue")
    t2 = pipeline.next("enrich", orders=2)["barrier"]
    aborted = pipeline.api.post(f"/jobs/enrich/barriers/{t2}/abort", json={"reason": "bad input"})
    assert aborted.status_code == 200 and aborted.json()["status"] == "aborted"
    again = pipeline.api.post(f"/jobs/enrich/barriers/{t2}/abort")
    assert again.status_code == 200
    pipeline.run("dims")

    decision = pipeline.next("revenue")
    assert decision["skipped"] == [t2]
    assert decision["action"] in ("idle", "wait")
    history = pipeline.api.get("/jobs/revenue/barriers").json()["runs"]
    assert history[0]["status"] == "aborted" and history[0]["barrier"] == t2
    # the aborted barrier never completes downstream; consistent reads stay at t1
    assert pipeline.versions([REVENUE], "weak").json()["barrier"] == t1

    t3 = pipeline.run("enrich", orders=3)["barrier"]
    after = pipeline.run("revenue")
    assert after["barrier"] == t3
    assert after["inputs"][ENRICHED] == {"snapshot_id": 1, "previous_snapshot_id": 0}
    assert pipeline.versions([REVENUE, ENRICHED], "weak").json()["barrier"] == t3


def test_idle_job_catches_up_many_barriers_in_one_call(pipeline: Pipeline) -> None:
    pipeline.run("dims", customers=1)
    barriers = [pipeline.api.post("/barriers").json()["barrier"] for _ in range(50)]
    decision = pipeline.next("dims")
    assert decision["action"] == "idle"
    ranges = pipeline.api.get(f"/tables/{table_path(DIM)}/barriers").json()["ranges"]
    assert len(ranges) == 1 and ranges[0]["last_barrier"] == barriers[-1]
    runs = pipeline.api.get("/jobs/dims/barriers").json()["runs"]
    assert [r["status"] for r in runs] == ["idle", "committed"]
    assert runs[0]["barrier"] == barriers[-1]


def test_storage_grows_with_snapshots_not_barriers(pipeline: Pipeline) -> None:
    pipeline.run("dims", customers=1)
    for _ in range(30):
        pipeline.api.post("/barriers")
        pipeline.next("dims")
    assert len(pipeline.api.get(f"/tables/{table_path(CUSTOMERS)}/barriers").json()["ranges"]) == 1
    assert len(pipeline.api.get(f"/tables/{table_path(DIM)}/barriers").json()["ranges"]) == 1
    assert len(pipeline.api.get("/jobs/dims/barriers").json()["runs"]) == 2


def test_registration_is_idempotent(api: httpx.Client) -> None:
    first = api.post(f"/register/sink/enrich/{table_path(ENRICHED)}", json={"format": "delta", "location": "/lake/x"})
    assert first.status_code == 201
    again = api.post(f"/register/sink/enrich/{table_path(ENRICHED)}")
    assert again.status_code == 200 and again.json()["created"] is False
    table = api.get(f"/tables/{table_path(ENRICHED)}").json()
    assert (table["writer"], table["format"], table["location"]) == ("enrich", "delta", "/lake/x")


def test_unregister_drops_edges_keeps_history_and_frees_the_table(pipeline: Pipeline) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    in_flight = pipeline.next("enrich", orders=2)["barrier"]
    response = pipeline.api.post("/unregister/enrich")
    assert response.json() == {"job_id": "enrich", "status": "unregistered"}
    job = pipeline.api.get("/jobs/enrich").json()
    assert (job["is_active"], job["sources"], job["sinks"], job["in_flight_barrier"]) == (False, [], [], None)
    runs = pipeline.api.get("/jobs/enrich/barriers").json()["runs"]
    assert [(r["barrier"], r["status"]) for r in runs] == [(in_flight, "aborted"), (t1, "committed")]
    table = pipeline.api.get(f"/tables/{table_path(ENRICHED)}").json()
    assert (table["kind"], table["writer"]) == ("root", None)
    claimed = pipeline.api.post(f"/register/sink/other/{table_path(ENRICHED)}")
    assert claimed.status_code == 201


def test_process_answer_names_each_sinks_baseline_snapshot(pipeline: Pipeline) -> None:
    first = pipeline.next("enrich", orders=1)
    assert first["sinks"] == {ENRICHED: {"previous_snapshot_id": None}}
    assert pipeline.commit("enrich", first["barrier"], **{ENRICHED: 4}).status_code == 200
    second = pipeline.next("enrich", orders=2)
    assert second["sinks"] == {ENRICHED: {"previous_snapshot_id": 4}}
    assert pipeline.next("enrich", orders=2) == second  # the baseline is replayed with the barrier


def test_a_new_job_starts_at_the_newest_barrier_unless_asked_to_start_earliest(pipeline: Pipeline) -> None:
    api = pipeline.api
    t1 = api.post("/barriers", json={"root_snapshots": {ORDERS: 1}}).json()["barrier"]
    t2 = api.post("/barriers", json={"root_snapshots": {ORDERS: 2}}).json()["barrier"]
    newest = pipeline.next("enrich")
    assert (newest["barrier"], newest["inputs"][ORDERS]["snapshot_id"]) == (t2, 2)
    backfill = api.post("/jobs/audit/barriers/next", json={"start": "earliest"}).json()
    assert (backfill["barrier"], backfill["inputs"][ORDERS]["snapshot_id"]) == (t1, 1)
    assert pipeline.commit("audit", t1, **{AUDIT: 0}).status_code == 200
    following = pipeline.next("audit")
    assert (following["barrier"], following["inputs"][ORDERS]) == (t2, {"snapshot_id": 2, "previous_snapshot_id": 1})
    bad = api.post("/jobs/dims/barriers/next", json={"start": "oldest"})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_request"
