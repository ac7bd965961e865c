"""Every problem `code` of API.md over HTTP: status, RFC 9457 body, the fields that help, and no state change.

PRODUCT.md guarantee 8: bad input gets a 4xx with a JSON error body that says what is wrong, never a 500,
and never changes state. Each test therefore reads the state back after the rejected request.

orders ──► enrich ──► orders_enriched   (the fixture `enrich`; other jobs are added per test)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import assert_problem, table_path

ORDERS, ENRICHED, AUDIT = "lake.raw.orders", "lake.mart.orders_enriched", "lake.mart.order_audit"
MAX_BODY_BYTES = 1_048_576  # Settings.max_body_bytes default; the test server runs with defaults


def error_locations(body: dict[str, Any]) -> list[list[str]]:
    return [list(error["loc"]) for error in body["errors"]]


def register(api: httpx.Client, role: str, job: str, table: str, **metadata: str) -> httpx.Response:
    return api.post(f"/register/{role}/{job}/{table_path(table)}", json=metadata or None)


def next_barrier(api: httpx.Client, job: str, *, orders: int) -> dict[str, Any]:
    response = api.post(f"/jobs/{job}/barriers/next", json={"root_snapshots": {ORDERS: orders}})
    assert response.status_code == 200, response.text
    return dict(response.json())


def process(api: httpx.Client, job: str, orders: int) -> int:
    """Have `job` take the barrier that seals `orders` snapshot `orders`; return the barrier."""
    decision = next_barrier(api, job, orders=orders)
    assert decision["action"] == "process", decision
    return int(decision["barrier"])


def commit(api: httpx.Client, job: str, barrier: int, snapshots: dict[str, int]) -> httpx.Response:
    return api.post(f"/jobs/{job}/barriers/{barrier}/commit", json={"snapshots": snapshots})


def table(api: httpx.Client, name: str) -> dict[str, Any]:
    response = api.get(f"/tables/{table_path(name)}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def job(api: httpx.Client, name: str) -> dict[str, Any]:
    response = api.get(f"/jobs/{name}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def runs(api: httpx.Client, name: str) -> list[dict[str, Any]]:
    response = api.get(f"/jobs/{name}/barriers")
    assert response.status_code == 200, response.text
    return list(response.json()["runs"])


def job_ids(api: httpx.Client) -> list[str]:
    return [j["job_id"] for j in api.get("/jobs").json()["jobs"]]


def table_names(api: httpx.Client) -> list[str]:
    return [t["table"] for t in api.get("/tables").json()["tables"]]


def barriers(api: httpx.Client) -> list[int]:
    return [b["barrier"] for b in api.get("/barriers").json()["barriers"]]


@pytest.fixture(name="enrich")
def fx_enrich(api: httpx.Client) -> httpx.Client:
    """orders ──► enrich ──► orders_enriched, registered, nothing run yet."""
    assert register(api, "source", "enrich", ORDERS).status_code == 201
    assert register(api, "sink", "enrich", ENRICHED).status_code == 201
    return api


# --- 422 invalid_request ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("catalog", "database", "name", "bad"),
    [
        ("lake", "ra$w", "orders", "database"),
        ("lake", "raw", "dot.ted", "table"),  # a dot would make `catalog.database.table` ambiguous
        ("-lake", "raw", "orders", "catalog"),
        ("lake", "raw", "x" * 129, "table"),
        ("lake", "with space", "orders", "database"),
    ],
)
def test_bad_table_name_part_is_invalid_request_and_registers_nothing(
    api: httpx.Client, catalog: str, database: str, name: str, bad: str
) -> None:
    response = api.post(f"/register/source/enrich/{catalog}/{database}/{name}")
    body = assert_problem(response, 422, "invalid_request", names=(bad,))
    assert error_locations(body) == [["path", bad]]
    assert table_names(api) == [] and job_ids(api) == []


@pytest.mark.parametrize("bad_job", ["-enrich", "en rich", "enrich!", "j" * 201])
def test_bad_job_id_is_invalid_request_and_creates_no_job(enrich: httpx.Client, bad_job: str) -> None:
    api = enrich
    for response in (
        api.post(f"/register/sink/{bad_job}/{table_path(AUDIT)}"),
        api.post(f"/jobs/{bad_job}/barriers/next"),
        api.post(f"/jobs/{bad_job}/barriers/1/commit", json={"snapshots": {ENRICHED: 1}}),
        api.post(f"/unregister/{bad_job}"),
        api.get(f"/jobs/{bad_job}"),
    ):
        body = assert_problem(response, 422, "invalid_request", names=("job_id",))
        assert ["path", "job_id"] in error_locations(body)
    assert job_ids(api) == ["enrich"]
    assert table_names(api) == [ENRICHED, ORDERS]


@pytest.mark.parametrize("key", ["", "x" * 256, "has space", "tab\tinside", "ünïcode"])
def test_bad_idempotency_key_is_invalid_request_and_issues_no_barrier(enrich: httpx.Client, key: str) -> None:
    api = enrich
    response = api.post("/barriers", json={}, headers=[(b"Idempotency-Key", key.encode())])
    body = assert_problem(response, 422, "invalid_request")
    assert ["header", "Idempotency-Key"] in error_locations(body), body
    assert barriers(api) == []


def test_malformed_json_is_invalid_request_and_issues_no_barrier(enrich: httpx.Client) -> None:
    api = enrich
    truncated = b'{"root_snapshots": {"lake.raw.orders": 1'
    response = api.post("/barriers", content=truncated, headers={"content-type": "application/json"})
    body = assert_problem(response, 422, "invalid_request", names=("body",))
    assert body["errors"][0]["type"] == "json_invalid"
    assert barriers(api) == []
    assert table(api, ORDERS)["latest_snapshot_id"] is None


def test_body_that_is_not_utf8_is_invalid_request_not_400(enrich: httpx.Client) -> None:
    """API.md: bad JSON is 422 `invalid_request`. Bytes that are not UTF-8 are bad JSON too (RFC 8259 §8.1)."""
    api = enrich
    response = api.post(
        "/barriers", content=b'{"root_snapshots": {"\xff": 1}}', headers={"content-type": "application/json"}
    )
    assert_problem(response, 422, "invalid_request", names=("body",))
    assert barriers(api) == []


@pytest.mark.parametrize(
    ("url", "payload", "field"),
    [
        (f"/tables/{table_path(ORDERS)}/snapshots", {"snapshot_id": "twelve"}, ["body", "snapshot_id"]),
        (f"/tables/{table_path(ORDERS)}/snapshots", {"snapshot_id": [12]}, ["body", "snapshot_id"]),
        (
            f"/tables/{table_path(ORDERS)}/snapshots",
            {"snapshot_id": 1, "committed_at": "yesterday"},
            ["body", "committed_at"],
        ),
        ("/jobs/enrich/barriers/next", {"root_snapshots": [ORDERS, 1]}, ["body", "root_snapshots"]),
        ("/jobs/enrich/barriers/next", {"root_snapshots": {ORDERS: 1.5}}, ["body", "root_snapshots", ORDERS]),
        ("/barriers", {"root_snapshots": {ORDERS: None}}, ["body", "root_snapshots", ORDERS]),
        ("/barriers", {"root_snapshot": {ORDERS: 1}}, ["body", "root_snapshot"]),  # unknown field
        ("/versions", {"tables": ORDERS}, ["body", "tables"]),
    ],
)
def test_wrong_types_are_invalid_request_naming_the_field_and_change_nothing(
    enrich: httpx.Client, url: str, payload: dict[str, Any], field: list[str]
) -> None:
    api = enrich
    body = assert_problem(api.post(url, json=payload), 422, "invalid_request", names=(".".join(field),))
    assert field in error_locations(body)
    assert table(api, ORDERS)["latest_snapshot_id"] is None
    assert barriers(api) == []
    assert job(api, "enrich")["in_flight_barrier"] is None


@pytest.mark.parametrize(
    "payload",
    [
        {"snapshot_id": True},  # JSON boolean, not an integer
        {"snapshot_id": "12"},  # JSON string, not an integer
        {"snapshot_id": 12, "committed_at": 0},  # JSON number, not an RFC 3339 string
    ],
)
def test_values_of_another_json_type_are_rejected_not_coerced(enrich: httpx.Client, payload: dict[str, Any]) -> None:
    """API.md: wrong types are 422. The document says `integer` / `date-time` string; the server must not coerce."""
    api = enrich
    response = api.post(f"/tables/{table_path(ORDERS)}/snapshots", json=payload)
    assert_problem(response, 422, "invalid_request")
    assert table(api, ORDERS)["latest_snapshot_id"] is None


@pytest.mark.parametrize(
    ("method", "url", "payload", "field"),
    [
        ("GET", "/tables?after=lake%00", None, "after"),
        ("GET", "/jobs?after=enrich%00", None, "after"),
        ("POST", f"/register/source/audit/{table_path(ORDERS)}", {"location": "s3://lake/\u0000orders"}, "location"),
        ("POST", "/leases", {"holder": "dash\u0000board", "snapshots": {ORDERS: 1}}, "holder"),
        ("POST", "/jobs/enrich/barriers/{barrier}/abort", {"reason": "disk\u0000full"}, "reason"),
    ],
)
def test_nul_characters_in_text_are_invalid_request_not_a_500(
    enrich: httpx.Client, method: str, url: str, payload: dict[str, Any] | None, field: str
) -> None:
    """PostgreSQL text cannot hold U+0000, so such text must be rejected as input, not crash the statement."""
    api = enrich
    barrier = process(api, "enrich", orders=1)
    response = api.request(method, url.format(barrier=barrier), json=payload)
    body = assert_problem(response, 422, "invalid_request", names=(field,))
    assert field in [loc[-1] for loc in error_locations(body)]
    assert job_ids(api) == ["enrich"]
    orders = table(api, ORDERS)
    assert (orders["readers"], orders["location"]) == (["enrich"], None)
    assert job(api, "enrich")["in_flight_barrier"] == barrier
    protected = api.get(f"/tables/{table_path(ORDERS)}/retention").json()["protected"]
    assert not [p for p in protected if p["reason"].startswith("lease:")]


@pytest.mark.parametrize("committed_at", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_committed_at_outside_what_can_be_read_back_is_invalid_request(enrich: httpx.Client, committed_at: str) -> None:
    """Both are valid RFC 3339, but in UTC they fall in year 0 and year 10000, which Python cannot represent: once
    stored, every later read of the table fails. They must be rejected before they are stored."""
    api = enrich
    report = {"snapshot_id": 3, "committed_at": committed_at}
    response = api.post(f"/tables/{table_path(ORDERS)}/snapshots", json=report)
    after = api.get(f"/tables/{table_path(ORDERS)}")
    assert after.status_code == 200, f"after answering {response.status_code}, the table cannot be read: {after.text}"
    assert_problem(response, 422, "invalid_request", names=("committed_at",))
    assert after.json()["latest_snapshot_id"] is None


def test_unknown_consistency_type_is_invalid_request(enrich: httpx.Client) -> None:
    api = enrich
    body = assert_problem(
        api.get(f"/version/eventual/{table_path(ORDERS)}"), 422, "invalid_request", names=("consistency_type",)
    )
    assert error_locations(body) == [["path", "consistency_type"]]
    body = assert_problem(
        api.post("/versions", json={"tables": [ORDERS], "consistency": "eventual"}),
        422,
        "invalid_request",
        names=("consistency",),
    )
    assert error_locations(body) == [["body", "consistency"]]


def test_negative_snapshot_ids_are_invalid_request_and_change_nothing(enrich: httpx.Client) -> None:
    api = enrich
    body = assert_problem(
        api.post(f"/tables/{table_path(ORDERS)}/snapshots", json={"snapshot_id": -1}),
        422,
        "invalid_request",
        names=("snapshot_id",),
    )
    assert error_locations(body) == [["body", "snapshot_id"]]
    body = assert_problem(
        api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: -5}}), 422, "invalid_request"
    )
    assert error_locations(body) == [["body", "root_snapshots", ORDERS]]
    assert table(api, ORDERS)["latest_snapshot_id"] is None
    assert barriers(api) == [] and job(api, "enrich")["in_flight_barrier"] is None

    barrier = process(api, "enrich", orders=1)
    body = assert_problem(commit(api, "enrich", barrier, {ENRICHED: -1}), 422, "invalid_request")
    assert error_locations(body) == [["body", "snapshots", ENRICHED]]
    assert job(api, "enrich")["in_flight_barrier"] == barrier
    assert table(api, ENRICHED)["newest_complete_barrier"] is None


def test_commit_must_list_exactly_the_jobs_sinks(enrich: httpx.Client) -> None:
    api = enrich
    assert register(api, "sink", "enrich", AUDIT).status_code == 201
    barrier = process(api, "enrich", orders=1)

    body = assert_problem(
        commit(api, "enrich", barrier, {ENRICHED: 1}), 422, "invalid_request", names=(ENRICHED, AUDIT)
    )
    assert body["missing"] == [AUDIT] and body["unexpected"] == []
    assert ["body", "snapshots", AUDIT] in error_locations(body)

    wrong = {ENRICHED: 1, AUDIT: 1, ORDERS: 1}
    body = assert_problem(commit(api, "enrich", barrier, wrong), 422, "invalid_request")
    assert body["missing"] == [] and body["unexpected"] == [ORDERS]

    body = assert_problem(commit(api, "enrich", barrier, {}), 422, "invalid_request")
    assert body["missing"] == [AUDIT, ENRICHED]

    assert job(api, "enrich")["in_flight_barrier"] == barrier
    assert [r["status"] for r in runs(api, "enrich")] == ["in_flight"]
    for sink in (ENRICHED, AUDIT):
        assert table(api, sink)["newest_complete_barrier"] is None
    assert commit(api, "enrich", barrier, {ENRICHED: 1, AUDIT: 1}).status_code == 200  # still committable


# --- 404 not_found ------------------------------------------------------------------------------------------------


def test_unknown_job_is_not_found_everywhere_and_is_not_created(enrich: httpx.Client) -> None:
    api = enrich
    process(api, "enrich", orders=1)
    barrier = barriers(api)[0]
    for response in (
        api.post("/jobs/ghost/barriers/next", json={"root_snapshots": {ORDERS: 2}}),
        api.post(f"/jobs/ghost/barriers/{barrier}/commit", json={"snapshots": {ENRICHED: 1}}),
        api.post(f"/jobs/ghost/barriers/{barrier}/abort"),
        api.post("/unregister/ghost"),
        api.get("/jobs/ghost"),
        api.get("/jobs/ghost/barriers"),
    ):
        assert_problem(response, 404, "not_found", names=("ghost",))
    assert job_ids(api) == ["enrich"]
    assert table(api, ORDERS)["latest_snapshot_id"] == 1  # the rejected `next` reported nothing
    assert barriers(api) == [barrier]


def test_unknown_table_is_not_found_in_versions_and_version(enrich: httpx.Client) -> None:
    api = enrich
    ghost = "lake.raw.ghost"
    body = assert_problem(
        api.post("/versions", json={"tables": [ORDERS, ghost], "consistency": "weak"}), 404, "not_found", names=(ghost,)
    )
    assert body["tables"] == [ghost]
    for consistency in ("weak", "strong"):
        assert_problem(api.get(f"/version/{consistency}/{table_path(ghost)}"), 404, "not_found", names=(ghost,))
    assert_problem(api.get(f"/tables/{table_path(ghost)}"), 404, "not_found", names=(ghost,))
    assert ghost not in table_names(api)


def test_unknown_barrier_is_not_found(enrich: httpx.Client) -> None:
    api = enrich
    issued = api.post("/barriers").json()["barrier"]
    body = assert_problem(api.get(f"/barriers/{issued + 1}"), 404, "not_found", names=(str(issued + 1),))
    assert body["barrier"] == issued + 1
    assert api.get(f"/barriers/{issued}").status_code == 200


@pytest.mark.parametrize(
    ("method", "url"),
    [("GET", "/nowhere"), ("POST", "/register/source/enrich/lake/raw"), ("GET", "/jobs/enrich/barriers/1/x")],
)
def test_unknown_route_is_not_found_problem(api: httpx.Client, method: str, url: str) -> None:
    assert_problem(api.request(method, url), 404, "not_found", names=(url,))
    assert job_ids(api) == []


# --- 404 no_consistent_version ------------------------------------------------------------------------------------


def test_no_consistent_version_before_the_first_completion(enrich: httpx.Client) -> None:
    api = enrich
    barrier = process(api, "enrich", orders=1)  # orders is sealed at the barrier, enrich has not committed it
    for consistency in ("weak", "strong"):
        body = assert_problem(
            api.post("/versions", json={"tables": [ORDERS, ENRICHED], "consistency": consistency}),
            404,
            "no_consistent_version",
            names=(ENRICHED,),
        )
        assert body["tables"] == [ORDERS, ENRICHED] and body["consistency"] == consistency
        assert_problem(
            api.get(f"/version/{consistency}/{table_path(ENRICHED)}"), 404, "no_consistent_version", names=(ENRICHED,)
        )
    assert api.get(f"/version/weak/{table_path(ORDERS)}").json()["barrier"] == barrier  # the root alone has one
    assert commit(api, "enrich", barrier, {ENRICHED: 1}).status_code == 200
    assert api.get(f"/version/strong/{table_path(ENRICHED)}").json()["snapshot_id"] == 1


# --- 409 protocol rules -------------------------------------------------------------------------------------------

T1, T2, T3 = "lake.loop.t1", "lake.loop.t2", "lake.loop.t3"


def test_edge_closing_a_three_job_loop_is_a_cycle_naming_the_loop(api: httpx.Client) -> None:
    for role, name, t in (("source", "a", T1), ("sink", "a", T2), ("source", "b", T2), ("sink", "b", T3)):
        assert register(api, role, name, t).status_code == 201
    assert register(api, "source", "c", T3).status_code == 201

    body = assert_problem(register(api, "sink", "c", T1), 409, "cycle", names=("c", T1))
    assert body["cycle"] == [T1, "a", T2, "b", T3, "c", T1]
    assert job(api, "c")["sinks"] == []
    assert table(api, T1)["writer"] is None and table(api, T1)["kind"] == "root"


def test_source_closing_a_three_job_loop_is_a_cycle_naming_the_loop(api: httpx.Client) -> None:
    for role, name, t in (("source", "a", T1), ("sink", "a", T2), ("source", "b", T2), ("sink", "b", T3)):
        assert register(api, role, name, t).status_code == 201
    assert register(api, "sink", "c", T1).status_code == 201

    body = assert_problem(register(api, "source", "c", T3), 409, "cycle", names=("c", T3))
    assert body["cycle"] == [T3, "c", T1, "a", T2, "b", T3]
    assert job(api, "c")["sources"] == []
    assert table(api, T3)["readers"] == []


def test_job_reading_and_writing_one_table_is_a_cycle(enrich: httpx.Client) -> None:
    api = enrich
    body = assert_problem(register(api, "source", "enrich", ENRICHED), 409, "cycle", names=(ENRICHED,))
    assert body["cycle"] == [ENRICHED, "enrich", ENRICHED]
    assert job(api, "enrich")["sources"] == [ORDERS]


def test_second_writer_is_rejected_with_table_has_writer(enrich: httpx.Client) -> None:
    api = enrich
    body = assert_problem(register(api, "sink", "rogue", ENRICHED), 409, "table_has_writer", names=(ENRICHED, "enrich"))
    assert body["writer"] == "enrich" and body["table"] == ENRICHED
    assert table(api, ENRICHED)["writer"] == "enrich"
    assert job_ids(api) == ["enrich"]  # the rejected registration did not create the job either
    assert register(api, "sink", "enrich", ENRICHED).status_code == 200  # the writer itself: idempotent


def test_commit_of_a_barrier_never_handed_out_is_not_in_flight(enrich: httpx.Client) -> None:
    api = enrich
    issued = api.post("/barriers", json={"root_snapshots": {ORDERS: 1}}).json()["barrier"]
    body = assert_problem(
        commit(api, "enrich", issued, {ENRICHED: 1}), 409, "not_in_flight", names=(str(issued), "enrich")
    )
    assert body["barrier"] == issued and body["job_id"] == "enrich"
    assert_problem(api.post(f"/jobs/enrich/barriers/{issued}/abort"), 409, "not_in_flight")
    assert_problem(commit(api, "enrich", issued + 1, {ENRICHED: 1}), 409, "not_in_flight")  # never issued at all
    assert runs(api, "enrich") == []
    assert table(api, ENRICHED)["newest_complete_barrier"] is None


def test_commit_after_abort_is_not_in_flight(enrich: httpx.Client) -> None:
    api = enrich
    barrier = process(api, "enrich", orders=1)
    assert api.post(f"/jobs/enrich/barriers/{barrier}/abort", json={"reason": "disk full"}).status_code == 200

    assert_problem(commit(api, "enrich", barrier, {ENRICHED: 1}), 409, "not_in_flight", names=(str(barrier), "aborted"))
    assert [(r["barrier"], r["status"]) for r in runs(api, "enrich")] == [(barrier, "aborted")]
    assert table(api, ENRICHED)["newest_complete_barrier"] is None


def test_commit_with_other_snapshots_is_snapshot_conflict(enrich: httpx.Client) -> None:
    api = enrich
    barrier = process(api, "enrich", orders=1)
    assert commit(api, "enrich", barrier, {ENRICHED: 1}).status_code == 200
    assert commit(api, "enrich", barrier, {ENRICHED: 1}).json()["snapshots"] == {ENRICHED: 1}  # same: a no-op

    body = assert_problem(
        commit(api, "enrich", barrier, {ENRICHED: 2}), 409, "snapshot_conflict", names=(str(barrier),)
    )
    assert body["committed"] == {ENRICHED: 1}
    info = table(api, ENRICHED)
    assert (info["newest_complete_barrier"], info["newest_complete_snapshot_id"]) == (barrier, 1)


def test_commit_of_an_older_snapshot_is_snapshot_regressed(enrich: httpx.Client) -> None:
    api = enrich
    first = process(api, "enrich", orders=1)
    assert commit(api, "enrich", first, {ENRICHED: 5}).status_code == 200
    second = process(api, "enrich", orders=2)

    body = assert_problem(
        commit(api, "enrich", second, {ENRICHED: 3}), 409, "snapshot_regressed", names=(ENRICHED, "5")
    )
    assert (body["table"], body["snapshot_id"], body["previous_snapshot_id"]) == (ENRICHED, 3, 5)
    assert job(api, "enrich")["in_flight_barrier"] == second
    info = table(api, ENRICHED)
    assert (info["newest_complete_barrier"], info["newest_complete_snapshot_id"]) == (first, 5)
    assert commit(api, "enrich", second, {ENRICHED: 5}).status_code == 200  # unchanged output is not a regression


def test_abort_after_commit_is_already_committed(enrich: httpx.Client) -> None:
    api = enrich
    barrier = process(api, "enrich", orders=1)
    assert commit(api, "enrich", barrier, {ENRICHED: 1}).status_code == 200

    body = assert_problem(
        api.post(f"/jobs/enrich/barriers/{barrier}/abort"), 409, "already_committed", names=(str(barrier),)
    )
    assert body["barrier"] == barrier
    assert [r["status"] for r in runs(api, "enrich")] == ["committed"]
    assert table(api, ENRICHED)["newest_complete_barrier"] == barrier


def test_snapshot_report_for_a_written_table_is_not_root(enrich: httpx.Client) -> None:
    api = enrich
    response = api.post(f"/tables/{table_path(ENRICHED)}/snapshots", json={"snapshot_id": 7})
    body = assert_problem(response, 409, "not_root", names=(ENRICHED, "enrich"))
    assert body["writer"] == "enrich" and body["table"] == ENRICHED
    assert table(api, ENRICHED)["latest_snapshot_id"] is None


def test_root_snapshots_naming_an_intermediate_table_are_not_root_and_report_nothing(enrich: httpx.Client) -> None:
    api = enrich
    roots = {"root_snapshots": {ORDERS: 4, ENRICHED: 3}}
    body = assert_problem(api.post("/jobs/enrich/barriers/next", json=roots), 409, "not_root", names=(ENRICHED,))
    assert body["tables"] == [ENRICHED]
    body = assert_problem(api.post("/barriers", json=roots), 409, "not_root", names=(ENRICHED,))
    assert body["tables"] == [ENRICHED]
    assert table(api, ORDERS)["latest_snapshot_id"] is None  # the valid half of the request was not applied
    assert barriers(api) == [] and job(api, "enrich")["in_flight_barrier"] is None


def test_conflicting_table_format_is_table_metadata_conflict(enrich: httpx.Client) -> None:
    api = enrich
    assert register(api, "source", "audit", ORDERS, format="delta", location="s3://lake/raw/orders").status_code == 201
    assert table(api, ORDERS)["format"] == "delta"

    body = assert_problem(
        register(api, "source", "dims", ORDERS, format="iceberg"), 409, "table_metadata_conflict", names=("delta",)
    )
    assert body["table"] == ORDERS and body["field"] == "format"
    body = assert_problem(
        register(api, "source", "dims", ORDERS, location="s3://elsewhere"),
        409,
        "table_metadata_conflict",
        names=("s3://lake/raw/orders",),
    )
    assert body["field"] == "location"
    info = table(api, ORDERS)
    assert (info["format"], info["location"]) == ("delta", "s3://lake/raw/orders")
    assert sorted(info["readers"]) == ["audit", "enrich"]
    assert "dims" not in job_ids(api)


def test_next_after_unregister_is_job_unregistered(enrich: httpx.Client) -> None:
    api = enrich
    assert api.post("/unregister/enrich").json() == {"job_id": "enrich", "status": "unregistered"}

    response = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: 1}})
    assert_problem(response, 409, "job_unregistered", names=("enrich",))
    assert barriers(api) == [] and runs(api, "enrich") == []
    assert table(api, ORDERS)["latest_snapshot_id"] is None


# --- 413 payload_too_large ----------------------------------------------------------------------------------------


def padded(size: int) -> bytes:
    """A valid JSON body (`{}` after leading whitespace) of exactly `size` bytes: only its size can be wrong."""
    return b" " * (size - 2) + b"{}"


def test_body_over_the_limit_is_payload_too_large_and_issues_no_barrier(api: httpx.Client) -> None:
    response = api.post("/barriers", content=padded(MAX_BODY_BYTES + 1), headers={"content-type": "application/json"})
    body = assert_problem(response, 413, "payload_too_large", names=(str(MAX_BODY_BYTES),))
    assert body["max_bytes"] == MAX_BODY_BYTES
    assert barriers(api) == []
    at_limit = api.post("/barriers", content=padded(MAX_BODY_BYTES), headers={"content-type": "application/json"})
    assert at_limit.status_code == 201, at_limit.text


def test_streamed_body_over_the_limit_is_payload_too_large(api: httpx.Client) -> None:
    """Without Content-Length (chunked transfer encoding) the limit must hold too."""

    def chunks() -> Iterator[bytes]:
        body = padded(MAX_BODY_BYTES + 64 * 1024)
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    response = api.post("/barriers", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers
    assert_problem(response, 413, "payload_too_large")
    assert barriers(api) == []


# --- 405 -----------------------------------------------------------------------------------------------------------


def test_method_not_allowed_lists_every_method_of_the_resource(api: httpx.Client) -> None:
    """RFC 9110 §15.5.6: a 405 carries `Allow` with the resource's supported methods (GET and POST /barriers)."""
    response = api.delete("/barriers")
    assert_problem(response, 405, "method_not_allowed")
    assert sorted(m.strip() for m in response.headers["allow"].split(",")) == ["GET", "POST"]
    assert barriers(api) == []


def test_a_field_of_fixed_values_names_them_in_the_answer(api: httpx.Client) -> None:
    body = assert_problem(
        api.post("/versions", json={"tables": ["a.b.c"], "consistency": "strng"}), 422, "invalid_request"
    )
    assert body["errors"][0]["loc"] == ["body", "consistency"]
    assert body["errors"][0]["allowed"] == ["strong", "weak"]
    assert "body.consistency (one of 'strong', 'weak')" in body["detail"]

    path = assert_problem(api.get("/version/eventual/a/b/c"), 422, "invalid_request")
    assert path["errors"][0]["allowed"] == ["strong", "weak"] and "'strong', 'weak'" in path["detail"]
    fmt = assert_problem(api.post("/register/sink/j/a/b/c", json={"format": "csv"}), 422, "invalid_request")
    assert fmt["errors"][0]["allowed"] == ["delta", "paimon", "iceberg"]
