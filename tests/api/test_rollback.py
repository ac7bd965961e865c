"""Rollback over HTTP: plan, complete, recompute (PRODUCT.md "Revision and rollback").

orders ──► enrich ──► orders_enriched ──┐
   └─────► audit  ──► order_audit       ├──► revenue ──► revenue_by_day
customers ► dims ───► customer_dim ─────┘
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from tests.support import ServerProcess

ORDERS, CUSTOMERS = "lake.raw.orders", "lake.raw.customers"
ENRICHED, AUDIT, DIM, REVENUE = (
    "lake.mart.orders_enriched",
    "lake.mart.order_audit",
    "lake.mart.customer_dim",
    "lake.mart.revenue_by_day",
)
JOBS: dict[str, tuple[list[str], list[str]]] = {
    "enrich": ([ORDERS], [ENRICHED]),
    "audit": ([ORDERS], [AUDIT]),
    "dims": ([CUSTOMERS], [DIM]),
    "revenue": ([ENRICHED, DIM], [REVENUE]),
}
PROBLEM_JSON = "application/problem+json"


def path(table: str) -> str:
    return table.replace(".", "/")


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body = dict(response.json())
    assert body["code"] == code and body["status"] == status
    return body


class Lake:
    """Drives the pipeline like the client library would and plays storage: every write is a new version."""

    def __init__(self, api: httpx.Client, jobs: dict[str, tuple[list[str], list[str]]] = JOBS) -> None:
        self.api, self.jobs = api, jobs
        self.versions: dict[str, int] = {}
        for job, (sources, sinks) in jobs.items():
            for table in sources:
                assert api.post(f"/register/source/{job}/{path(table)}").status_code in (200, 201)
            for table in sinks:
                assert api.post(f"/register/sink/{job}/{path(table)}").status_code in (200, 201)

    def write(self, table: str) -> int:
        """A new version of `table` in storage (a write, a restore or a correction)."""
        self.versions[table] = self.versions.get(table, -1) + 1
        return self.versions[table]

    def ingest(self, table: str) -> int:
        """A new root snapshot, reported to MetaService."""
        version = self.write(table)
        response = self.api.post(f"/tables/{path(table)}/snapshots", json={"snapshot_id": version})
        assert response.status_code == 200, response.text
        return version

    def next(self, job: str) -> dict[str, Any]:
        response = self.api.post(f"/jobs/{job}/barriers/next")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def commit(self, job: str, barrier: int) -> httpx.Response:
        outputs = {sink: self.write(sink) for sink in self.jobs[job][1]}
        return self.api.post(f"/jobs/{job}/barriers/{barrier}/commit", json={"snapshots": outputs})

    def run(self, job: str) -> dict[str, Any]:
        decision = self.next(job)
        if decision["action"] == "process":
            response = self.commit(job, decision["barrier"])
            assert response.status_code == 200, response.text
        return decision

    def run_all(self) -> None:
        for job in ("enrich", "audit", "dims", "revenue"):
            self.run(job)

    def barrier(self) -> int:
        """Ingest new orders and let every job process the barrier that seals them."""
        self.ingest(ORDERS)
        barrier = int(self.api.post("/barriers").json()["barrier"])
        self.run_all()
        return barrier

    def ranges(self, table: str) -> list[tuple[int, int | None, int | None, str]]:
        body = self.api.get(f"/tables/{path(table)}/barriers").json()
        return sorted((r["first_barrier"], r["last_barrier"], r["snapshot_id"], r["how"]) for r in body["ranges"])

    def strong(self, tables: list[str]) -> dict[str, Any]:
        response = self.api.post("/versions", json={"tables": tables, "consistency": "strong"})
        assert response.status_code == 200, response.text
        return dict(response.json())

    def restore(self, plan: dict[str, Any]) -> None:
        """What the client's apply_rollback does to storage: a restore is one more version of each table."""
        for table in plan["tables"]:
            self.write(table)


@pytest.fixture(name="lake")
def fx_lake(api: httpx.Client) -> Lake:
    lake = Lake(api)
    lake.ingest(CUSTOMERS)
    return lake


def plan(api: httpx.Client, table: str, barrier: int) -> dict[str, Any]:
    response = api.post("/rollbacks", json={"table": table, "barrier": barrier})
    assert response.status_code == 201, response.text
    return dict(response.json())


def complete(api: httpx.Client, rollback_id: str, **body: Any) -> dict[str, Any]:
    response = api.post(f"/rollbacks/{rollback_id}/complete", json=body or None)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_plan_covers_the_table_and_everything_downstream_but_not_unrelated_branches(lake: Lake) -> None:
    b1, b2 = lake.barrier(), lake.barrier()
    planned = plan(lake.api, ORDERS, b1)
    assert planned == {
        "rollback_id": planned["rollback_id"],
        "table": ORDERS,
        "barrier": b1,
        "tables": {
            ORDERS: {"restore_snapshot_id": 0},
            ENRICHED: {"restore_snapshot_id": 0},
            AUDIT: {"restore_snapshot_id": 0},
            REVENUE: {"restore_snapshot_id": 0},
        },
        "jobs": {name: {"resume_after_barrier": b1} for name in ("audit", "enrich", "revenue")},
        "status": "planned",
        "created_at": planned["created_at"],
        "completed_at": None,
        "cancelled_at": None,
    }
    assert lake.api.get(f"/rollbacks/{planned['rollback_id']}").json() == planned
    # planning changes nothing: the pipeline still reads b2
    assert lake.strong([REVENUE])["barrier"] == b2

    # an intermediate table: its writer recomputes it, upstream and sibling branches stay
    middle = plan(lake.api, ENRICHED, b2)
    assert middle["tables"] == {ENRICHED: {"restore_snapshot_id": 1}, REVENUE: {"restore_snapshot_id": 1}}
    assert set(middle["jobs"]) == {"enrich", "revenue"}


def test_plan_errors_are_problem_documents(lake: Lake) -> None:
    b1 = lake.barrier()
    assert_problem(lake.api.post("/rollbacks", json={"table": "lake.raw.nope", "barrier": b1}), 404, "not_found")
    missing = assert_problem(lake.api.post("/rollbacks", json={"table": ORDERS, "barrier": b1 - 1}), 404, "not_found")
    assert missing["barrier"] == b1 - 1
    for body in (
        {"table": ORDERS, "barrier": 0},
        {"table": "not a table", "barrier": b1},
        {"table": ORDERS},
        {"table": ORDERS, "barrier": b1, "extra": 1},
        {"table": ORDERS, "barrier": "soon"},
    ):
        assert_problem(lake.api.post("/rollbacks", json=body), 422, "invalid_request")
    assert_problem(lake.api.post("/rollbacks", content=b"{", headers={"content-type": "application/json"}), 422,
                   "invalid_request")  # fmt: skip

    lake.ingest(ORDERS)
    b2 = int(lake.api.post("/barriers").json()["barrier"])
    lake.run("enrich")  # revenue, audit and dims have not completed b2
    conflict = assert_problem(lake.api.post("/rollbacks", json={"table": ORDERS, "barrier": b2}), 409,
                              "rollback_conflict")  # fmt: skip
    assert conflict["tables"] == [AUDIT, REVENUE]
    assert conflict["barrier"] == b2

    for method, url in (
        ("GET", "/rollbacks/00000000-0000-0000-0000-000000000000"),
        ("POST", "/rollbacks/00000000-0000-0000-0000-000000000000/complete"),
        ("POST", "/rollbacks/00000000-0000-0000-0000-000000000000/cancel"),
    ):
        assert_problem(lake.api.request(method, url), 404, "not_found")
    assert_problem(lake.api.get("/rollbacks/not!an-id"), 422, "invalid_request")


def test_bad_root_data_is_rolled_back_and_the_pipeline_recomputes_from_the_corrected_root(lake: Lake) -> None:
    b1 = lake.barrier()
    at_b1 = dict(lake.versions)
    b2 = lake.barrier()  # orders version 1 is bad; every job processed it
    b3 = lake.barrier()
    assert lake.strong([REVENUE, ENRICHED, AUDIT, DIM])["barrier"] == b3
    bad = {t: lake.versions[t] for t in (ENRICHED, AUDIT, REVENUE)}

    planned = plan(lake.api, ORDERS, b1)
    lake.restore(planned)
    done = complete(lake.api, planned["rollback_id"])
    assert done == {**planned, "status": "completed", "completed_at": done["completed_at"]}
    assert done["completed_at"] is not None
    assert complete(lake.api, planned["rollback_id"]) == done  # idempotent

    # everything after b1 is forgotten downstream; the root holds its restore snapshot after b1
    for table in (ENRICHED, AUDIT, REVENUE):
        assert lake.ranges(table) == [(b1, b1, 0, "committed")]
        assert lake.api.get(f"/tables/{path(table)}").json()["latest_snapshot_id"] == 0
    assert lake.ranges(ORDERS) == [(b1, b1, 0, "sealed"), (b2, None, 0, "restored")]
    for job in ("enrich", "audit", "revenue"):
        info = lake.api.get(f"/jobs/{job}").json()
        assert (info["last_barrier"], info["in_flight_barrier"]) == (b1, None)
        runs = lake.api.get(f"/jobs/{job}/barriers").json()["runs"]
        assert [(r["barrier"], r["status"]) for r in runs] == [(b1, "committed")]
    # the unrelated branch is untouched
    assert lake.ranges(DIM) == [(b1, b3, 0, "committed")]
    assert lake.api.get("/jobs/dims").json()["last_barrier"] == b3
    # strong answers went back to b1's data (documented: the one way back in time). With orders restored to its
    # b1 snapshot, no job's input changed after b1: b2 and b3 complete idle for the reader (rule 12)
    assert lake.strong([REVENUE]) == {"consistency": "strong", "barrier": b3, "versions": {REVENUE: at_b1[REVENUE]}}

    # the corrected orders arrive as a new snapshot after the restore; the jobs rerun
    corrected = lake.ingest(ORDERS)
    decision = lake.run("enrich")
    b4 = decision["barrier"]
    assert decision["action"] == "process" and b4 > b3
    assert decision["inputs"] == {ORDERS: {"snapshot_id": corrected, "previous_snapshot_id": 0}}
    lake.run_all()

    strong = lake.strong([REVENUE, ENRICHED, AUDIT, DIM])
    assert strong["barrier"] == b4
    assert strong["versions"] == {t: lake.versions[t] for t in (REVENUE, ENRICHED, AUDIT, DIM)}
    for table in (ENRICHED, AUDIT, REVENUE):
        assert strong["versions"][table] > bad[table]
        # the rolled-back barriers hold the snapshot of b1, nothing computed from the bad orders
        assert lake.ranges(table) == [(b1, b3, 0, "committed"), (b4, b4, lake.versions[table], "committed")]
    runs = lake.api.get("/jobs/revenue/barriers").json()["runs"]
    assert [(r["first_barrier"], r["barrier"], r["status"]) for r in runs] == [
        (b4, b4, "committed"),
        (b2, b3, "idle"),
        (b1, b1, "committed"),
    ]
    assert lake.api.get("/jobs/revenue/barriers").json()["runs"][0]["inputs"][ENRICHED] == {
        "snapshot_id": lake.versions[ENRICHED],
        "previous_snapshot_id": 0,
    }


def test_rolling_back_an_intermediate_table_reruns_its_writer_from_the_barrier(lake: Lake) -> None:
    b1, b2 = lake.barrier(), lake.barrier()
    planned = plan(lake.api, ENRICHED, b1)
    lake.restore(planned)
    complete(lake.api, planned["rollback_id"])
    assert lake.ranges(ORDERS)[-1] == (b2, None, 1, "sealed")  # the root is not touched
    assert lake.api.get("/jobs/audit").json()["last_barrier"] == b2

    decision = lake.run("enrich")  # recomputes b2 from the same orders snapshot (e.g. with fixed code)
    assert (decision["action"], decision["barrier"]) == ("process", b2)
    assert decision["inputs"] == {ORDERS: {"snapshot_id": 1, "previous_snapshot_id": 0}}
    lake.run("revenue")
    assert lake.strong([REVENUE, AUDIT]) == {
        "consistency": "strong",
        "barrier": b2,
        "versions": {REVENUE: lake.versions[REVENUE], AUDIT: 1},
    }


def test_completion_aborts_in_flight_barriers_of_affected_jobs(lake: Lake) -> None:
    b1 = lake.barrier()
    lake.ingest(ORDERS)
    in_flight = lake.next("enrich")
    assert in_flight["action"] == "process"

    planned = plan(lake.api, ORDERS, b1)
    complete(lake.api, planned["rollback_id"])
    late = lake.commit("enrich", in_flight["barrier"])
    body = assert_problem(late, 409, "not_in_flight")
    assert body["barrier"] == in_flight["barrier"]
    assert lake.api.get("/jobs/enrich").json()["in_flight_barrier"] is None
    assert lake.ranges(ENRICHED) == [(b1, b1, 0, "committed")]


def test_stale_plan_is_rejected_and_can_be_cancelled(lake: Lake) -> None:
    b1 = lake.barrier()
    planned = plan(lake.api, ORDERS, b1)
    retention = lake.api.get(f"/tables/{path(ENRICHED)}/retention").json()
    assert {"snapshot_id": 0, "reason": f"rollback:{planned['rollback_id']}"} in retention["protected"]

    # a new reader of an affected table appears after planning
    assert lake.api.post(f"/register/source/export/{path(REVENUE)}").status_code == 201
    assert lake.api.post("/register/sink/export/lake/out/revenue_export").status_code == 201
    stale = assert_problem(lake.api.post(f"/rollbacks/{planned['rollback_id']}/complete"), 409, "rollback_stale")
    assert (stale["jobs_added"], stale["tables_added"]) == (["export"], ["lake.out.revenue_export"])
    assert (stale["jobs_removed"], stale["tables_removed"], stale["tables_changed"]) == ([], [], [])
    assert lake.ranges(ENRICHED) == [(b1, b1, 0, "committed")]
    assert lake.api.get(f"/rollbacks/{planned['rollback_id']}").json()["status"] == "planned"

    cancelled = lake.api.post(f"/rollbacks/{planned['rollback_id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert lake.api.post(f"/rollbacks/{planned['rollback_id']}/cancel").json() == cancelled.json()
    assert_problem(lake.api.post(f"/rollbacks/{planned['rollback_id']}/complete"), 409, "rollback_not_planned")
    retention = lake.api.get(f"/tables/{path(ENRICHED)}/retention").json()
    assert not [p for p in retention["protected"] if p["reason"].startswith("rollback:")]

    assert lake.api.post("/unregister/export").status_code == 200
    done = plan(lake.api, ORDERS, b1)
    complete(lake.api, done["rollback_id"])
    assert_problem(lake.api.post(f"/rollbacks/{done['rollback_id']}/cancel"), 409, "rollback_not_planned")


def test_a_second_rollback_planned_before_the_first_completed_is_stale(lake: Lake) -> None:
    b1, b2 = lake.barrier(), lake.barrier()
    lake.barrier()
    late = plan(lake.api, ORDERS, b2)
    early = plan(lake.api, ORDERS, b1)
    complete(lake.api, early["rollback_id"])
    stale = assert_problem(lake.api.post(f"/rollbacks/{late['rollback_id']}/complete"), 409, "rollback_stale")
    assert stale["tables_changed"] == sorted([AUDIT, ENRICHED, ORDERS, REVENUE])
    assert lake.api.get(f"/rollbacks/{late['rollback_id']}").json()["status"] == "planned"


def test_the_barrier_after_a_rollback_seals_the_root_snapshot_given_with_completion(lake: Lake) -> None:
    """The rollback moves the root's newest snapshot past the one it holds: the next barrier must seal it, with no
    report in between (the rollback marks its tables for the seal, migration 2026-11-24-2200)."""
    b1 = lake.barrier()
    lake.barrier()  # its seal cleared every mark
    planned = plan(lake.api, ORDERS, b1)
    lake.restore(planned)
    restored = lake.versions[ORDERS]
    assert complete(lake.api, planned["rollback_id"], root_snapshots={ORDERS: restored})["status"] == "completed"
    issued = lake.api.post("/barriers")
    assert issued.status_code == 201, issued.text
    assert issued.json()["sealed"] == {ORDERS: restored}


def test_root_snapshot_after_the_restore_can_be_given_with_completion(lake: Lake) -> None:
    b1 = lake.barrier()
    lake.barrier()
    bad = lake.versions[ORDERS]
    planned = plan(lake.api, ORDERS, b1)
    lake.restore(planned)
    url = f"/rollbacks/{planned['rollback_id']}/complete"
    assert_problem(lake.api.post(url, json={"root_snapshots": {ENRICHED: 9}}), 422, "invalid_request")
    assert_problem(lake.api.post(url, json={"root_snapshots": {ORDERS: -1}}), 422, "invalid_request")
    assert_problem(lake.api.post(url, json={"unknown": {}}), 422, "invalid_request")

    restored = lake.versions[ORDERS]
    done = complete(lake.api, planned["rollback_id"], root_snapshots={ORDERS: restored})
    assert done["status"] == "completed"
    assert lake.api.get(f"/tables/{path(ORDERS)}").json()["latest_snapshot_id"] == restored
    # a reader that still sees the bad version cannot bring it back
    response = lake.api.post(f"/tables/{path(ORDERS)}/snapshots", json={"snapshot_id": bad})
    assert response.json()["latest_snapshot_id"] == restored
    decision = lake.next("audit")
    assert decision["action"] == "process"
    assert decision["inputs"] == {ORDERS: {"snapshot_id": restored, "previous_snapshot_id": 0}}


def test_restore_snapshot_lower_than_planned_is_rejected(lake: Lake) -> None:
    lake.barrier()
    b2 = lake.barrier()
    planned = plan(lake.api, ORDERS, b2)
    body = assert_problem(
        lake.api.post(f"/rollbacks/{planned['rollback_id']}/complete", json={"root_snapshots": {ORDERS: 0}}),
        409,
        "snapshot_regressed",
    )
    assert body["previous_snapshot_id"] == 1
    assert lake.api.get(f"/rollbacks/{planned['rollback_id']}").json()["status"] == "planned"


def test_rollback_to_the_newest_barrier_keeps_the_root_open(lake: Lake) -> None:
    lake.barrier()
    b2 = lake.barrier()
    lake.ingest(ORDERS)  # reported, not sealed yet
    planned = plan(lake.api, ORDERS, b2)
    complete(lake.api, planned["rollback_id"])
    assert lake.ranges(ORDERS)[-1] == (b2, None, 1, "sealed")
    assert lake.api.get(f"/tables/{path(ORDERS)}").json()["latest_snapshot_id"] == 1
    assert lake.next("enrich")["action"] == "idle"  # nothing after b2 to redo, and nothing new sealed
    assert lake.strong([REVENUE])["barrier"] == b2


def race(base_url: str, calls: dict[str, tuple[str, str, Any]]) -> dict[str, httpx.Response]:
    """Send the calls at the same moment, one thread and connection each; wait for every answer."""
    start = threading.Barrier(len(calls))
    results: dict[str, httpx.Response] = {}

    def call(name: str, method: str, url: str, body: Any) -> None:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            start.wait(timeout=10)
            results[name] = client.request(method, url, json=body)

    threads = [threading.Thread(target=call, args=(name, *spec)) for name, spec in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert set(results) == set(calls), "a racing call did not finish"
    return results


def test_commits_racing_completion_get_409_or_are_forgotten_never_half_applied(
    lake: Lake, server: ServerProcess
) -> None:
    b1 = lake.barrier()
    deadline = time.monotonic() + 20
    outcomes = {"committed": 0, "not_in_flight": 0}
    iterations = 0
    while iterations < 40 and time.monotonic() < deadline:
        iterations += 1
        lake.ingest(ORDERS)
        decisions = {job: lake.next(job) for job in ("enrich", "audit")}
        assert all(d["action"] == "process" for d in decisions.values()), decisions
        planned = plan(lake.api, ORDERS, b1)
        calls: dict[str, tuple[str, str, Any]] = {
            job: (
                "POST",
                f"/jobs/{job}/barriers/{d['barrier']}/commit",
                {"snapshots": {JOBS[job][1][0]: lake.write(JOBS[job][1][0])}},
            )
            for job, d in decisions.items()
        }
        calls["rollback"] = ("POST", f"/rollbacks/{planned['rollback_id']}/complete", None)
        results = race(server.base_url, calls)

        assert results["rollback"].status_code == 200, results["rollback"].text
        for job in decisions:
            if results[job].status_code == 200:
                outcomes["committed"] += 1
            else:
                assert_problem(results[job], 409, "not_in_flight")
                outcomes["not_in_flight"] += 1
            # all or nothing: whichever came first, the job and its sink are back at b1
            info = lake.api.get(f"/jobs/{job}").json()
            assert (info["last_barrier"], info["in_flight_barrier"]) == (b1, None)
            assert lake.ranges(JOBS[job][1][0]) == [(b1, b1, 0, "committed")]
            runs = lake.api.get(f"/jobs/{job}/barriers").json()["runs"]
            assert [(r["barrier"], r["status"]) for r in runs] == [(b1, "committed")]
    assert iterations >= 5
    assert sum(outcomes.values()) == 2 * iterations


def test_completing_twice_concurrently_applies_once(lake: Lake, server: ServerProcess) -> None:
    b1 = lake.barrier()
    lake.barrier()
    planned = plan(lake.api, ORDERS, b1)
    url = f"/rollbacks/{planned['rollback_id']}/complete"
    results = race(server.base_url, {str(i): ("POST", url, None) for i in range(4)})
    assert [r.status_code for r in results.values()] == [200] * 4
    assert len({r.text for r in results.values()}) == 1
    assert lake.ranges(ENRICHED) == [(b1, b1, 0, "committed")]
