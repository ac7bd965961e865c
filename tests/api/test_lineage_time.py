"""Lineage through time (issue 17): `GET /lineage?as_of=`, `GET /lineage/changes`, and the two delay figures
(freshness and lag) in the API and the metrics, over HTTP against the real server; auth scoping against a server
started with authentication on."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from metaservice.db import migrate
from tests import support
from tests.api.test_auth import create_token
from tests.api.test_changing_lineage import Flow
from tests.api.test_metrics import by_label, scrape
from tests.model.wire import path

R, S, A = "lake.raw.r", "lake.raw.s", "lake.mart.a"


def graph(api: httpx.Client, **params: Any) -> dict[str, Any]:
    answer = api.get("/lineage", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def edges(body: dict[str, Any]) -> set[tuple[str, str]]:
    return {(e["from"], e["to"]) for e in body["edges"]}


def node(body: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in body["nodes"] if n["id"] == node_id)


@pytest.fixture(name="changed")
def fx_changed(api: httpx.Client) -> dict[str, Any]:
    """j1 reads r and writes a; b1 completes; then j1 gains source s and hands a over to j2 (reading r); b2."""
    flow = Flow(api)
    flow.register("j1", sources=[R], sinks=[A])
    flow.report(R, 1)
    b1 = flow.issue()
    assert flow.run("j1", {A: 10}) == b1
    flow.register("j1", sources=[S])
    api.delete(f"/register/sink/j1/{path(A)}").raise_for_status()
    flow.register("j2", sources=[R], sinks=[A])
    changes = api.get("/lineage/changes").json()["changes"]
    b2 = flow.issue()
    issued = {b: api.get(f"/barriers/{b}").json()["issued_at"] for b in (b1, b2)}
    return {"b1": b1, "b2": b2, "issued": issued, "changed_at": changes[0]["at"]}


BEFORE = {("table:lake.raw.r", "job:j1"), ("job:j1", "table:lake.mart.a")}
AFTER = {("table:lake.raw.r", "job:j1"), ("table:lake.raw.s", "job:j1"), ("table:lake.raw.r", "job:j2"),
         ("job:j2", "table:lake.mart.a")}  # fmt: skip


def test_as_of_a_barrier_answers_the_lineage_in_effect_at_it(api: httpx.Client, changed: dict[str, Any]) -> None:
    b1, b2 = changed["b1"], changed["b2"]
    then = graph(api, as_of=b1)
    assert edges(then) == BEFORE
    assert then["as_of"] == {"barrier": b1, "time": changed["issued"][b1]}
    a = node(then, "table:lake.mart.a")
    assert (a["newest_complete_barrier"], a["newest_complete_snapshot_id"]) == (b1, 10)
    assert a["freshness_seconds"] == a["delay_seconds"] == 0.0  # measured at b1's issue
    assert a["lag_seconds"] is None and a["latest_snapshot_id"] is None  # not kept through time
    assert {n["id"] for n in then["nodes"] if n["kind"] == "job"} == {"job:j1"}

    later = graph(api, as_of=b2)
    assert edges(later) == AFTER and later["as_of"]["barrier"] == b2
    now = graph(api)
    assert edges(now) == AFTER and now["as_of"] is None
    # around a table, in one direction, too
    assert edges(graph(api, table=A, direction="upstream", as_of=b1)) == BEFORE
    assert edges(graph(api, table=A, direction="upstream", as_of=b2)) == {
        ("table:lake.raw.r", "job:j2"), ("job:j2", "table:lake.mart.a")}  # fmt: skip


def test_as_of_a_time_answers_the_edges_that_existed_then(api: httpx.Client, changed: dict[str, Any]) -> None:
    b1 = changed["b1"]
    at_b1 = graph(api, as_of=changed["issued"][b1])
    assert edges(at_b1) == BEFORE and at_b1["as_of"]["barrier"] == b1
    # the changes existed from their commit on, before a barrier took them into effect
    after_change = graph(api, as_of=changed["changed_at"])
    assert edges(after_change) == AFTER and after_change["as_of"]["barrier"] == b1
    first = api.get("/lineage/changes").json()["changes"][-1]  # j1 reads r: registered before any barrier
    at_start = graph(api, as_of=first["at"])
    assert edges(at_start) == {("table:lake.raw.r", "job:j1")} and at_start["as_of"]["barrier"] is None
    assert all(n["newest_complete_barrier"] is None for n in at_start["nodes"] if n["kind"] == "table")
    assert node(at_start, "job:j1")["last_barrier"] is None and node(at_start, "job:j1")["recent_runs"] == []
    long_ago = graph(api, as_of="2001-01-01T00:00:00+00:00")
    assert long_ago["nodes"] == [] and long_ago["as_of"]["barrier"] is None


def shape(body: dict[str, Any]) -> tuple[set[str], set[tuple[str, str]]]:
    return {n["id"] for n in body["nodes"]}, edges(body)


def test_bad_as_of_values_are_problems_that_change_nothing(api: httpx.Client, changed: dict[str, Any]) -> None:
    before = shape(graph(api)), api.get("/lineage/changes").json(), api.get("/barriers").json()
    for value, status in [
        ("yesterday", 422),
        ("2026-11-24T09:00:00", 422),  # no time zone
        ("-5", 422),
        ("1.5", 422),
        ("", 422),
        ("99999999999999999999", 404),  # a barrier number beyond int64: never issued
        ("1", 404),  # never issued
        (str(changed["b2"] + 1), 404),
    ]:
        for route in ("/lineage", "/lineage/changes"):
            params = {"as_of": value} if route == "/lineage" else {"since": value}
            answer = api.get(route, params=params)
            if route == "/lineage/changes" and status == 404:
                assert answer.status_code == 200  # a bound needs no issued barrier
                continue
            assert answer.status_code == status, (route, value, answer.text)
            assert answer.headers["content-type"].startswith("application/problem+json")
            assert answer.json()["code"] in ("invalid_request", "validation_error", "not_found")
    assert (shape(graph(api)), api.get("/lineage/changes").json(), api.get("/barriers").json()) == before


def test_changes_are_listed_newest_first_with_their_barriers(api: httpx.Client, changed: dict[str, Any]) -> None:
    b1, b2 = changed["b1"], changed["b2"]
    body = api.get("/lineage/changes").json()
    assert body["next"] is None
    listed = [(c["change"], c["job_id"], c["role"], c["table"], c["barrier"], c["effective_barrier"])
              for c in body["changes"]]  # fmt: skip
    assert listed == [
        ("added", "j2", "sink", A, b1, b2),
        ("added", "j2", "source", R, b1, b2),
        ("removed", "j1", "sink", A, b1, b2),
        ("added", "j1", "source", S, b1, b2),
        ("added", "j1", "sink", A, 0, b1),
        ("added", "j1", "source", R, 0, b1),
    ]
    times = [c["at"] for c in body["changes"]]
    assert times == sorted(times, reverse=True) and len(listed) == 6

    # pages of two, following the cursor, give the same list
    paged, cursor = [], None
    while True:
        page = api.get("/lineage/changes", params={"limit": 2} | ({"cursor": cursor} if cursor else {})).json()
        paged += page["changes"]
        cursor = page["next"]
        if cursor is None:
            break
    assert paged == body["changes"]

    assert {c["job_id"] for c in api.get("/lineage/changes", params={"job": "j2"}).json()["changes"]} == {"j2"}
    on_a = api.get("/lineage/changes", params={"table": A}).json()["changes"]
    assert [(c["change"], c["job_id"]) for c in on_a] == [("added", "j2"), ("removed", "j1"), ("added", "j1")]
    since = api.get("/lineage/changes", params={"since": b1}).json()["changes"]
    assert len(since) == 4 and all(c["barrier"] >= b1 for c in since)
    until = api.get("/lineage/changes", params={"until": b1}).json()["changes"]
    assert len(until) == 2 and all(c["barrier"] == 0 for c in until)
    by_time = api.get("/lineage/changes", params={"since": changed["issued"][b1]}).json()["changes"]
    assert len(by_time) == 4

    for params in ({"cursor": "not-a-cursor"}, {"limit": 0}, {"until": "soon"}, {"job": "no spaces"}):
        answer = api.get("/lineage/changes", params=params)
        assert answer.status_code == 422, (params, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")


def delay(api: httpx.Client, table: str) -> dict[str, Any]:
    answer = api.get(f"/tables/{path(table)}/delay")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_caught_up_table_has_no_lag_while_its_freshness_grows_and_new_root_data_makes_it_lag(
    api: httpx.Client,
) -> None:
    flow = Flow(api)
    flow.register("j1", sources=[R], sinks=[A])
    flow.report(R, 1)
    b1 = flow.issue()
    assert flow.run("j1", {A: 10}) == b1
    first = delay(api, A)
    assert first["lag_seconds"] == 0.0 and first["freshness_seconds"] == first["delay_seconds"] >= 0.0
    support.wait_until(
        lambda: delay(api, A)["freshness_seconds"] > first["freshness_seconds"] + 0.05,
        timeout=10,
        what="freshness to grow",
    )
    assert delay(api, A)["lag_seconds"] == 0.0  # nothing newer upstream: caught up

    flow.report(R, 2)
    b2 = flow.issue()  # seals r's new snapshot: a lacks it
    lagging = delay(api, A)
    assert lagging["barrier"] == b1 and lagging["lag_seconds"] > 0.0
    assert lagging["lag_seconds"] < lagging["freshness_seconds"]  # measured from b2, not b1
    listed = {d["table"]: d for d in api.get("/delays").json()["delays"]}
    assert listed[A]["lag_seconds"] > 0.0 and listed[R]["lag_seconds"] == 0.0
    assert listed[A]["freshness_seconds"] == listed[A]["delay_seconds"]
    nodes = graph(api)
    assert node(nodes, "table:lake.mart.a")["lag_seconds"] > 0.0
    assert node(nodes, "table:lake.raw.r")["lag_seconds"] == 0.0
    samples = scrape(api)
    assert by_label(samples, "metaservice_table_lag_seconds", "table")[A] > 0.0
    assert by_label(samples, "metaservice_table_freshness_seconds", "table")[A] > 0.0

    assert flow.run("j1", {A: 11}) == b2
    assert delay(api, A)["lag_seconds"] == 0.0
    assert by_label(scrape(api), "metaservice_table_lag_seconds", "table")[A] == 0.0


def test_lag_follows_the_oldest_missing_root_data_down_a_chain(api: httpx.Client) -> None:
    flow = Flow(api)
    flow.register("j1", sources=[R], sinks=[A])
    flow.register("j2", sources=[A, S], sinks=["lake.mart.b"])
    flow.report(R, 1)
    flow.report(S, 1)
    b1 = flow.issue()
    assert flow.run("j1", {A: 10}) == b1
    assert flow.run("j2", {"lake.mart.b": 20}) == b1
    assert delay(api, "lake.mart.b")["lag_seconds"] == 0.0
    flow.report(S, 2)
    assert delay(api, "lake.mart.b")["lag_seconds"] == 0.0  # a report no barrier sealed: no version can hold it yet
    b2 = flow.issue()
    issued = api.get(f"/barriers/{b2}").json()["issued_at"]
    lagging = delay(api, "lake.mart.b")
    assert lagging["lag_seconds"] > 0.0 and lagging["barrier"] == b1
    assert delay(api, A)["lag_seconds"] == 0.0  # a does not read s: nothing newer reached it
    assert delay(api, A)["barrier"] == b2  # j1's input did not change at b2: a completed it idle (rule 12)
    # b lacks s's snapshot since b2 was issued: its lag is measured from b2, freshness from b1
    assert lagging["freshness_seconds"] - lagging["lag_seconds"] == pytest.approx(
        (datetime.fromisoformat(issued) - datetime.fromisoformat(lagging["issued_at"])).total_seconds(), abs=0.01
    )


# --- auth ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", name="secured")
def fx_secured(
    admin_url: str, worker_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    url = support.fresh_database(admin_url, f"ms_lineage_time_{worker_id}")
    migrate.upgrade(url)
    tokens = {
        "admin": create_token(url, "ops", "admin"),
        "job": create_token(url, "team-a-runner", "job", "team-a.*", tables=("lake.team_a.*",)),
        "reader": create_token(url, "dashboard", "reader"),
    }
    log = tmp_path_factory.mktemp("lineage-time-auth") / "server.log"
    server = support.ServerProcess(url, env={"METASERVICE_AUTH_ENABLED": "true"}, log_path=log).start()
    yield server.base_url, tokens
    server.stop()


def test_with_auth_every_token_reads_history_like_the_graph_and_no_token_reads_nothing(
    secured: tuple[str, dict[str, str]],
) -> None:
    base, tokens = secured
    admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {tokens['admin']}"}, timeout=30)
    with admin:
        flow = Flow(admin)
        flow.register("team-a.load", sources=["lake.raw.a"], sinks=["lake.team_a.t"])
        flow.register("team-b.load", sources=["lake.raw.a"], sinks=["lake.team_b.t"])
        flow.report("lake.raw.a", 1)
        barrier = flow.issue()
        flow.run("team-a.load", {"lake.team_a.t": 5})
        flow.run("team-b.load", {"lake.team_b.t": 6})
        routes = [
            f"/lineage?as_of={barrier}",
            "/lineage/changes",
            "/tables/lake/team_b/t/snapshots/6/lineage",
            "/delays",
        ]
        seen = {route: admin.get(route) for route in routes}
    for route in routes:
        assert seen[route].status_code == 200, seen[route].text
        anonymous = httpx.get(base + route, timeout=30)
        assert anonymous.status_code == 401 and anonymous.json()["code"] == "unauthorized"
        bogus = httpx.get(base + route, headers={"Authorization": "Bearer ms_nope"}, timeout=30)
        assert bogus.status_code == 401
        for role in ("job", "reader"):
            # reads are open to every token, as for GET /lineage; the job token is scoped to team-a's writes only
            answer = httpx.get(base + route, headers={"Authorization": f"Bearer {tokens[role]}"}, timeout=30)
            assert answer.status_code == 200, (role, route, answer.text)
            if route != "/delays":  # delays move with the clock
                assert answer.json() == seen[route].json()
    plain = httpx.get(base + "/lineage", headers={"Authorization": f"Bearer {tokens['job']}"}, timeout=30).json()
    assert plain["nodes"] and {e["from"] for e in plain["edges"]} >= {"job:team-b.load"}
    # a read never writes: the job token still may not write team-b's table
    denied = httpx.post(
        base + "/register/sink/team-b.other/lake/team_b/u", headers={"Authorization": f"Bearer {tokens['job']}"}
    )
    assert denied.status_code == 403
