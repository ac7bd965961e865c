"""Pipelines driven through the API the way the client library drives them, for tests of several modules.

The diamond of PRODUCT.md and a chain of three jobs, and three drivers over them: `Pipeline` (the protocol and
version tests: short root names, commits it can inspect), `Driver` (delays, metrics and the UI: any lineage, work
inside a job's span) and `Flow` (changing lineages: every call states the outcomes it accepts, through
`tests.model.wire`).

orders ──► enrich ──► orders_enriched ──┐
   └─────► audit  ──► order_audit       ├──► revenue ──► revenue_by_day
customers ► dims ───► customer_dim ─────┘
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from tests.model.wire import Answer, Wire
from tests.support.http import table_path

Lineage = Mapping[str, tuple[list[str], list[str]]]  # job → (sources, sinks)

ORDERS, CUSTOMERS = "lake.raw.orders", "lake.raw.customers"
ENRICHED, AUDIT, DIM, REVENUE = (
    "lake.mart.orders_enriched",
    "lake.mart.order_audit",
    "lake.mart.customer_dim",
    "lake.mart.revenue_by_day",
)
DIAMOND: Lineage = {
    "enrich": ([ORDERS], [ENRICHED]),
    "audit": ([ORDERS], [AUDIT]),
    "dims": ([CUSTOMERS], [DIM]),
    "revenue": ([ENRICHED, DIM], [REVENUE]),
}
RAW_A, MART_B, MART_C, MART_D = "lake.raw.a", "lake.mart.b", "lake.mart.c", "lake.mart.d"
CHAIN: Lineage = {"j1": ([RAW_A], [MART_B]), "j2": ([MART_B], [MART_C]), "j3": ([MART_C], [MART_D])}

# Requests made inside a span to make it long: each is a real round trip through the server (≥ ~0.3 ms each).
LONG_WORK = 400


def register_jobs(api: httpx.Client, jobs: Lineage) -> None:
    """Register every job's sources and sinks (a repeat of a registration is fine)."""
    for job, (sources, sinks) in jobs.items():
        for table in sources:
            assert api.post(f"/register/source/{job}/{table_path(table)}").status_code in (200, 201)
        for table in sinks:
            assert api.post(f"/register/sink/{job}/{table_path(table)}").status_code in (200, 201)


def seed_history(api: httpx.Client) -> None:
    """A small pipeline with history (a committed barrier, one left in flight, a lease), so that list and detail
    answers carry real objects."""
    for role, job, table in (
        ("source", "enrich", "lake/raw/orders"),
        ("sink", "enrich", "lake/mart/orders_enriched"),
        ("source", "revenue", "lake/mart/orders_enriched"),
        ("sink", "revenue", "lake/mart/revenue"),
    ):
        assert api.post(f"/register/{role}/{job}/{table}", json={"format": "delta"}).status_code == 201
    first = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {"lake.raw.orders": 1}}).json()
    commit = {"snapshots": {"lake.mart.orders_enriched": 1}}
    assert api.post(f"/jobs/enrich/barriers/{first['barrier']}/commit", json=commit).status_code == 200
    assert api.post("/jobs/revenue/barriers/next").json()["action"] == "process"  # left in flight
    lease = {"holder": "seed", "snapshots": {"lake.raw.orders": 1}}
    assert api.post("/leases", json=lease).status_code == 201


class Pipeline:
    """Drives jobs through the API like the client library would, asserting every call succeeds."""

    def __init__(self, api: httpx.Client) -> None:
        self.api = api
        self.snapshots: dict[str, int] = {}

    def register(self, jobs: Lineage = DIAMOND) -> None:
        register_jobs(self.api, jobs)

    def next(self, job: str, **roots: int) -> dict[str, Any]:
        """`next` for `job`, reporting the root snapshots it reads; the others (which a job may not report) are
        reported by the ingestion endpoint first, so one barrier seals them all."""
        reported = {f"lake.raw.{name}": v for name, v in roots.items()}
        for table, snapshot in reported.items():
            if table not in DIAMOND[job][0]:
                answer = self.api.post(f"/tables/{table_path(table)}/snapshots", json={"snapshot_id": snapshot})
                assert answer.status_code == 200, answer.text
        body = {"root_snapshots": {t: v for t, v in reported.items() if t in DIAMOND[job][0]}}
        response = self.api.post(f"/jobs/{job}/barriers/next", json=body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def commit(self, job: str, barrier: int, **outputs: int) -> httpx.Response:
        return self.api.post(f"/jobs/{job}/barriers/{barrier}/commit", json={"snapshots": outputs})

    def run(self, job: str, **roots: int) -> dict[str, Any]:
        """One job step: process the offered barrier by writing a new snapshot of each sink."""
        decision = self.next(job, **roots)
        if decision["action"] == "process":
            outputs = {}
            for sink in DIAMOND[job][1]:
                self.snapshots[sink] = self.snapshots.get(sink, -1) + 1
                outputs[sink] = self.snapshots[sink]
            response = self.commit(job, decision["barrier"], **outputs)
            assert response.status_code == 200, response.text
        return decision

    def versions(self, tables: list[str], consistency: str) -> httpx.Response:
        return self.api.post("/versions", json={"tables": tables, "consistency": consistency})


class Driver:
    """Registers a pipeline and runs its jobs through the API, like the client library does."""

    def __init__(self, api: httpx.Client, jobs: Lineage) -> None:
        self.api, self.jobs = api, jobs
        self.snapshots: dict[str, int] = {}
        register_jobs(api, jobs)

    def next(self, job: str, roots: dict[str, int] | None = None) -> dict[str, Any]:
        """`next` for `job`; root snapshots it does not read (a job may not report them) go to the ingestion
        endpoint first, so one barrier seals them all."""
        reads = self.jobs[job][0]
        for table, snapshot in (roots or {}).items():
            if table not in reads:
                answer = self.api.post(f"/tables/{table_path(table)}/snapshots", json={"snapshot_id": snapshot})
                assert answer.status_code == 200, answer.text
        own = {t: v for t, v in (roots or {}).items() if t in reads}
        response = self.api.post(f"/jobs/{job}/barriers/next", json={"root_snapshots": own})
        assert response.status_code == 200, response.text
        return dict(response.json())

    def commit(self, job: str, barrier: int) -> None:
        outputs = {}
        for sink in self.jobs[job][1]:
            self.snapshots[sink] = self.snapshots.get(sink, -1) + 1
            outputs[sink] = self.snapshots[sink]
        response = self.api.post(f"/jobs/{job}/barriers/{barrier}/commit", json={"snapshots": outputs})
        assert response.status_code == 200, response.text

    def run(self, job: str, roots: dict[str, int] | None = None, *, during: Callable[[], None] | None = None) -> int:
        """Process the offered barrier (doing `during` between next and commit); returns the barrier."""
        decision = self.next(job, roots)
        assert decision["action"] == "process", decision
        if during is not None:
            during()
        self.commit(job, decision["barrier"])
        return int(decision["barrier"])

    def busy(self, requests: int = LONG_WORK) -> None:
        """Real work that takes time: unrelated round trips through the server."""
        for _ in range(requests):
            assert self.api.get("/healthz").status_code == 200

    def last_run(self, job: str) -> dict[str, Any]:
        runs = self.api.get(f"/jobs/{job}/barriers").json()["runs"]
        return dict(runs[0])

    def delay(self, table: str, **params: Any) -> dict[str, Any]:
        response = self.api.get(f"/tables/{table_path(table)}/delay", params=params)
        assert response.status_code == 200, response.text
        return dict(response.json())


class Flow:
    """Drives the API like a user of the issue did; every call states the outcomes it accepts."""

    def __init__(self, api: httpx.Client) -> None:
        self.wire = Wire(api)

    def register(self, job: str, *, sources: Iterable[str] = (), sinks: Iterable[str] = ()) -> None:
        for table in sources:
            self.wire.post(f"/register/source/{job}/{table_path(table)}", expect=(200, 201))
        for table in sinks:
            self.wire.post(f"/register/sink/{job}/{table_path(table)}", expect=(200, 201))

    def report(self, table: str, snapshot_id: int) -> None:
        self.wire.post(f"/tables/{table_path(table)}/snapshots", {"snapshot_id": snapshot_id}, expect=(200,))

    def issue(self) -> int:
        return int(self.wire.post("/barriers", {}, expect=(201,)).json()["barrier"])

    def next(self, job: str, roots: Mapping[str, int] | None = None) -> dict[str, Any]:
        body = {"root_snapshots": dict(roots or {})}
        return self.wire.post(f"/jobs/{job}/barriers/next", body, expect=(200,)).json()

    def process(self, job: str, roots: Mapping[str, int] | None = None) -> dict[str, Any]:
        decision = self.next(job, roots)
        assert decision["action"] == "process", decision
        return decision

    def commit(self, job: str, barrier: int, snapshots: Mapping[str, int]) -> Answer:
        return self.wire.post(f"/jobs/{job}/barriers/{barrier}/commit", {"snapshots": dict(snapshots)}, expect=(200,))

    def abort(self, job: str, barrier: int) -> Answer:
        return self.wire.post(f"/jobs/{job}/barriers/{barrier}/abort", {"reason": "test"}, expect=(200,))

    def run(self, job: str, snapshots: Mapping[str, int], roots: Mapping[str, int] | None = None) -> int:
        """`next` must hand out a barrier; commit `snapshots` for it; return the barrier."""
        barrier = int(self.process(job, roots)["barrier"])
        self.commit(job, barrier, snapshots)
        return barrier

    def unregister(self, job: str) -> None:
        assert self.wire.post(f"/unregister/{job}", expect=(200,)).json()["status"] == "unregistered"

    def versions(self, tables: list[str], consistency: str) -> Answer:
        body = {"tables": tables, "consistency": consistency}
        return self.wire.post("/versions", body, expect=(200, "no_consistent_version"))

    def weak(self, tables: list[str]) -> dict[str, Any]:
        answer = self.versions(tables, "weak")
        assert answer.status == 200, answer.body
        return {"barrier": answer.json()["barrier"], "versions": answer.json()["versions"]}

    def strong(self, tables: list[str]) -> int | None:
        """The strong barrier of `tables`, None while there is none (404 no_consistent_version)."""
        answer = self.versions(tables, "strong")
        return int(answer.json()["barrier"]) if answer.status == 200 else None

    def barriers(self) -> list[int]:
        """Every barrier issued, newest first."""
        listed = self.wire.get("/barriers", params={"limit": 1000}, expect=(200,)).json()["barriers"]
        return [int(b["barrier"]) for b in listed]

    def ranges(self, table: str) -> list[dict[str, Any]]:
        return list(self.wire.get(f"/tables/{table_path(table)}/barriers", expect=(200,)).json()["ranges"])

    def table(self, table: str) -> dict[str, Any]:
        return self.wire.get(f"/tables/{table_path(table)}", expect=(200,)).json()

    def job(self, job: str) -> dict[str, Any]:
        return self.wire.get(f"/jobs/{job}", expect=(200,)).json()

    def answers_pairing(self, table: str, snapshot_id: int, *, after: int, subsets: list[list[str]]) -> list[Any]:
        """Every /versions answer (weak and strong) over `subsets` that holds `table` at `snapshot_id` at a barrier
        after `after`: the reads the issue found that were never produced together."""
        found = []
        for tables in subsets:
            for consistency in ("weak", "strong"):
                answer = self.versions(tables, consistency)
                if answer.status != 200:
                    continue
                body = answer.json()
                if body["barrier"] > after and body["versions"].get(table) == snapshot_id:
                    found.append((consistency, tables, body))
        return found
