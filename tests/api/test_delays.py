"""End-to-end delay, critical path and bottleneck over HTTP on pipelines driven through the API.

The server clock cannot be mocked, so timings are controlled by construction: one job's span is made long by doing
real work inside it (hundreds of requests between `next` and `commit`), and every figure is checked against the
timestamps the job history reports, which come from the same database rows.
"""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest

from tests.support import table_path
from tests.support.pipelines import (
    CHAIN,
    CUSTOMERS,
    DIAMOND,
    MART_B,
    MART_C,
    MART_D,
    ORDERS,
    RAW_A,
    REVENUE,
    Driver,
)


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def span(later: str, earlier: str) -> float:
    return (at(later) - at(earlier)).total_seconds()


@pytest.fixture(name="chain")
def fx_chain(api: httpx.Client) -> Driver:
    return Driver(api, CHAIN)


@pytest.fixture(name="diamond")
def fx_diamond(api: httpx.Client) -> Driver:
    return Driver(api, DIAMOND)


def test_critical_path_of_a_chain_matches_the_job_history_and_names_the_slow_job(chain: Driver) -> None:
    barrier = chain.run("j1", {RAW_A: 1})
    assert chain.run("j2", during=chain.busy) == barrier
    assert chain.run("j3") == barrier

    delay = chain.delay(MART_D)
    issued_at = chain.api.get(f"/barriers/{barrier}").json()["issued_at"]
    assert delay["table"] == MART_D and delay["table_kind"] == "intermediate"
    assert delay["barrier"] == barrier and at(delay["issued_at"]) == at(issued_at)
    assert [s["job_id"] for s in delay["critical_path"]] == ["j1", "j2", "j3"]
    assert [s["table"] for s in delay["critical_path"]] == [MART_B, MART_C, MART_D]
    for step in delay["critical_path"]:
        run = chain.last_run(step["job_id"])
        assert step["barrier"] == barrier and step["status"] == "committed"
        assert at(step["started_at"]) == at(run["started_at"])
        assert at(step["finished_at"]) == at(run["finished_at"])
        assert at(step["inputs_ready_at"]) == at(run["inputs_ready_at"])
        assert step["processing_seconds"] == span(run["finished_at"], run["started_at"])
        assert step["processing_seconds"] == run["duration_seconds"]
        assert step["waiting_seconds"] == span(run["started_at"], run["inputs_ready_at"])

    slow = delay["critical_path"][1]
    others = [delay["critical_path"][0], delay["critical_path"][2]]
    assert all(
        slow["processing_seconds"] > o["processing_seconds"] + o["waiting_seconds"] + slow["waiting_seconds"]
        for o in others
    )
    assert delay["bottleneck_job"] == "j2"
    assert delay["bottleneck_seconds"] == slow["processing_seconds"] + slow["waiting_seconds"]

    j3 = chain.last_run("j3")
    assert at(delay["completed_at"]) == at(j3["finished_at"])
    assert delay["end_to_end_seconds"] == span(j3["finished_at"], issued_at)
    assert delay["delay_seconds"] >= delay["end_to_end_seconds"] > slow["processing_seconds"]
    assert delay["delay_seconds"] == span(delay["as_of"], issued_at)
    assert delay["path_truncated"] is False


def test_a_job_that_starts_late_is_the_bottleneck_by_its_waiting_time(chain: Driver) -> None:
    barrier = chain.run("j1", {RAW_A: 1})
    chain.run("j2")
    chain.busy()  # c is ready; j3 only asks after all this
    chain.run("j3")

    delay = chain.delay(MART_D)
    first, second, third = delay["critical_path"]
    j2, j3 = chain.last_run("j2"), chain.last_run("j3")
    assert at(j2["started_at"]) <= at(third["inputs_ready_at"]) <= at(j2["finished_at"])
    assert third["waiting_seconds"] == span(j3["started_at"], j3["inputs_ready_at"])
    assert third["waiting_seconds"] > third["processing_seconds"]
    assert third["waiting_seconds"] > max(s["waiting_seconds"] + s["processing_seconds"] for s in (first, second))
    assert delay["bottleneck_job"] == "j3" and delay["barrier"] == barrier


def test_critical_path_follows_the_input_that_completed_last(diamond: Driver) -> None:
    t1 = diamond.run("enrich", {ORDERS: 1, CUSTOMERS: 1})
    diamond.run("dims", during=lambda: diamond.busy(50))  # dims finishes after enrich
    diamond.run("revenue")
    first = diamond.delay(REVENUE)
    assert first["barrier"] == t1
    assert [s["job_id"] for s in first["critical_path"]] == ["dims", "revenue"]

    t2 = diamond.api.post("/barriers", json={"root_snapshots": {ORDERS: 2, CUSTOMERS: 2}}).json()["barrier"]
    assert diamond.run("dims") == t2
    assert diamond.run("enrich", during=lambda: diamond.busy(50)) == t2  # now enrich finishes last
    assert diamond.run("revenue") == t2
    second = diamond.delay(REVENUE)
    assert second["barrier"] == t2
    assert [s["job_id"] for s in second["critical_path"]] == ["enrich", "revenue"]
    # the first barrier can still be analysed
    again = diamond.delay(REVENUE, barrier=t1)
    assert again["barrier"] == t1
    assert [s["job_id"] for s in again["critical_path"]] == ["dims", "revenue"]
    assert again["critical_path"] == first["critical_path"]


def test_unchanged_inputs_complete_through_idle_steps_that_process_nothing(chain: Driver) -> None:
    chain.run("j1", {RAW_A: 1})
    chain.run("j2")
    chain.run("j3")
    issued = chain.api.post("/barriers").json()  # the root is unchanged: every job completes it without work
    assert chain.next("j3")["action"] == "idle"  # settles the idle writers upstream too

    delay = chain.delay(MART_D)
    assert delay["barrier"] == issued["barrier"]
    steps = delay["critical_path"]
    assert [s["job_id"] for s in steps] == ["j1", "j2", "j3"]
    assert {s["status"] for s in steps} == {"idle"}
    assert all(s["processing_seconds"] == 0 and s["waiting_seconds"] >= 0 for s in steps)


def test_root_table_delay_is_measured_from_the_newest_barrier(chain: Driver) -> None:
    chain.run("j1", {RAW_A: 1})
    newest = chain.api.post("/barriers").json()
    delay = chain.delay(RAW_A)
    assert delay["table_kind"] == "root"
    assert delay["barrier"] == newest["barrier"]
    assert delay["critical_path"] == [] and delay["bottleneck_job"] is None
    assert delay["delay_seconds"] == span(delay["as_of"], newest["issued_at"]) >= 0


def test_table_that_completed_nothing_has_null_delay(chain: Driver) -> None:
    chain.next("j1", {RAW_A: 1})  # in flight, not committed
    delay = chain.delay(MART_D)
    assert delay["barrier"] is None and delay["delay_seconds"] is None
    assert delay["critical_path"] == [] and delay["bottleneck_job"] == "j3"  # the writer that has to run first


def test_delay_errors_are_problem_documents(chain: Driver) -> None:
    barrier = chain.run("j1", {RAW_A: 1})
    cases = [
        ("/tables/lake/mart/nope/delay", {}, 404, "not_found"),
        (f"/tables/{table_path(MART_B)}/delay", {"barrier": barrier + 1}, 404, "not_found"),
        (f"/tables/{table_path(MART_C)}/delay", {"barrier": barrier}, 404, "no_consistent_version"),
        (f"/tables/{table_path(MART_B)}/delay", {"barrier": 0}, 422, "invalid_request"),
        ("/tables/lake/mart/bad!name/delay", {}, 422, "invalid_request"),
    ]
    for url, params, status, code in cases:
        response = chain.api.get(url, params=params)
        assert response.status_code == status, (url, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == code


def test_delays_lists_every_table_worst_first_with_its_bottleneck(chain: Driver) -> None:
    chain.run("j1", {RAW_A: 1})
    chain.run("j2", during=chain.busy)
    t2 = chain.run("j1", {RAW_A: 2})  # b moves on; c and d stay at the first barrier

    body = chain.api.get("/delays").json()
    delays = {d["table"]: d for d in body["delays"]}
    assert list(delays) == [MART_D, MART_C, MART_B, RAW_A]  # d never completed; c is older than b and a
    assert delays[MART_D]["delay_seconds"] is None and delays[MART_D]["bottleneck_job"] == "j3"  # it has to run
    assert delays[MART_C]["bottleneck_job"] == "j2"
    assert delays[MART_B]["barrier"] == delays[RAW_A]["barrier"] == t2
    assert delays[MART_C]["delay_seconds"] > delays[MART_B]["delay_seconds"] >= delays[RAW_A]["delay_seconds"]
    single = chain.delay(MART_C)
    assert delays[MART_C]["bottleneck_seconds"] == single["bottleneck_seconds"]
