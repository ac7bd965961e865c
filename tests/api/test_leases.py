"""Leases and retention over HTTP (PRODUCT.md guarantee 7: safe retention)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import httpx
import psycopg
import pytest

from tests import support
from tests.support import assert_problem, table_path

ORDERS, ENRICHED = "lake.raw.orders", "lake.mart.orders_enriched"


def lease(api: httpx.Client, snapshots: dict[str, int], *, holder: str = "dashboard-7", **extra: Any) -> dict[str, Any]:
    response = api.post("/leases", json={"holder": holder, "snapshots": snapshots, **extra})
    assert response.status_code == 201, response.text
    return dict(response.json())


def expires(body: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(body["expires_at"])


@pytest.fixture(name="enrich")
def fx_enrich(api: httpx.Client) -> httpx.Client:
    """orders ──► enrich ──► orders_enriched, registered."""
    assert api.post(f"/register/source/enrich/{table_path(ORDERS)}").status_code == 201
    assert api.post(f"/register/sink/enrich/{table_path(ENRICHED)}").status_code == 201
    return api


def test_lease_is_created_renewed_and_released(enrich: httpx.Client) -> None:
    api = enrich
    created = lease(api, {ORDERS: 5, ENRICHED: 2}, ttl_seconds=600)
    assert uuid.UUID(created["lease_id"])
    assert created == {
        "lease_id": created["lease_id"],
        "holder": "dashboard-7",
        "owner": None,  # authentication is off: no token created it
        "expires_at": created["expires_at"],
        "snapshots": {ORDERS: 5, ENRICHED: 2},
    }
    url = f"/leases/{created['lease_id']}"
    assert api.get(url).json() == created

    renewed = api.post(f"{url}/renew")  # default: the ttl it was created with, from now
    assert renewed.status_code == 200, renewed.text
    assert expires(renewed.json()) > expires(created)
    shorter = api.post(f"{url}/renew", json={"ttl_seconds": 60}).json()
    assert expires(shorter) < expires(renewed.json())
    again = api.post(f"{url}/renew", json=None).json()  # still the original 600 s
    assert (expires(again) - expires(shorter)).total_seconds() > 500
    assert {k: v for k, v in again.items() if k != "expires_at"} == {
        k: v for k, v in created.items() if k != "expires_at"
    }

    released = api.delete(url)
    assert released.status_code == 204 and released.content == b""
    assert_problem(api.get(url), 404, "not_found")
    assert_problem(api.post(f"{url}/renew"), 404, "not_found")
    assert_problem(api.delete(url), 404, "not_found")


@pytest.mark.parametrize(
    "body",
    [
        {"holder": "h", "snapshots": {ORDERS: 1}, "ttl_seconds": 0},
        {"holder": "h", "snapshots": {ORDERS: 1}, "ttl_seconds": 0.5},
        {"holder": "h", "snapshots": {ORDERS: 1}, "ttl_seconds": 7 * 24 * 3600 + 1},
        {"holder": "h", "snapshots": {ORDERS: 1}, "ttl_seconds": -5},
        {"holder": "h", "snapshots": {ORDERS: 1}, "ttl_seconds": "long"},
        {"holder": "", "snapshots": {ORDERS: 1}},
        {"holder": "x" * 201, "snapshots": {ORDERS: 1}},
        {"snapshots": {ORDERS: 1}},
        {"holder": "h", "snapshots": {}},
        {"holder": "h"},
        {"holder": "h", "snapshots": {ORDERS: -1}},
        {"holder": "h", "snapshots": {ORDERS: "five"}},
        {"holder": "h", "snapshots": {"not-a-table": 1}},
        {"holder": "h", "snapshots": {f"lake.raw.t{i}": 1 for i in range(1001)}},
        {"holder": "h", "snapshots": {ORDERS: 1}, "consistency": "strong"},
        [],
    ],
)
def test_bad_lease_requests_are_422(enrich: httpx.Client, body: Any) -> None:
    assert_problem(enrich.post("/leases", json=body), 422, "invalid_request")


def test_lease_limits_and_unknown_tables(enrich: httpx.Client) -> None:
    api = enrich
    lease(api, {ORDERS: 0}, holder="x" * 200, ttl_seconds=7 * 24 * 3600)
    lease(api, {ORDERS: 0}, ttl_seconds=1)
    missing = assert_problem(api.post("/leases", json={"holder": "h", "snapshots": {ORDERS: 1, "a.b.c": 1}}), 404,
                             "not_found")  # fmt: skip
    assert missing["tables"] == ["a.b.c"]

    url = f"/leases/{lease(api, {ORDERS: 1})['lease_id']}"
    for body in ({"ttl_seconds": 0}, {"ttl_seconds": 604801}, {"ttl": 5}):
        assert_problem(api.post(f"{url}/renew", json=body), 422, "invalid_request")
    unknown = str(uuid.uuid4())
    assert_problem(api.get(f"/leases/{unknown}"), 404, "not_found")
    assert_problem(api.post(f"/leases/{unknown}/renew"), 404, "not_found")
    assert_problem(api.delete(f"/leases/{unknown}"), 404, "not_found")
    assert_problem(api.get("/leases/not!a-lease"), 422, "invalid_request")


def test_expiry_follows_the_database_clock(enrich: httpx.Client, database_url: str) -> None:
    api = enrich
    held = lease(api, {ORDERS: 3}, holder="reader")
    other = lease(api, {ORDERS: 4}, holder="other")
    with psycopg.connect(database_url, autocommit=True) as conn:  # the server's clock moves past the expiry
        conn.execute(
            "UPDATE leases SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour'"
            " WHERE id = %s",
            (held["lease_id"],),
        )
    url = f"/leases/{held['lease_id']}"
    assert_problem(api.get(url), 404, "not_found")
    assert_problem(api.post(f"{url}/renew"), 404, "not_found")
    assert_problem(api.delete(url), 404, "not_found")
    reasons = [p["reason"] for p in api.get(f"/tables/{table_path(ORDERS)}/retention").json()["protected"]]
    assert reasons == ["lease:other"]
    assert api.get(f"/leases/{other['lease_id']}").status_code == 200


def test_a_short_lease_expires_by_itself(enrich: httpx.Client) -> None:
    api = enrich
    url = f"/leases/{lease(api, {ORDERS: 1}, ttl_seconds=1)['lease_id']}"
    support.wait_until(lambda: api.get(url).status_code == 404, timeout=15, what="the 1 s lease to expire")
    assert_problem(api.get(url), 404, "not_found")
    assert api.get(f"/tables/{table_path(ORDERS)}/retention").json()["protected"] == []


def test_retention_protects_in_flight_inputs_leases_the_strong_version_and_the_newest(enrich: httpx.Client) -> None:
    api = enrich
    assert_problem(api.get("/tables/lake/raw/nope/retention"), 404, "not_found")
    assert api.get(f"/tables/{table_path(ORDERS)}/retention").json() == {
        "table": ORDERS,
        "oldest_protected_snapshot_id": None,
        "protected": [],
    }

    first = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: 1}}).json()
    assert api.post(f"/jobs/enrich/barriers/{first['barrier']}/commit", json={"snapshots": {ENRICHED: 0}}).is_success
    second = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: 2}}).json()
    assert second["action"] == "process"
    b1, b2 = first["barrier"], second["barrier"]
    held = lease(api, {ORDERS: 0, ENRICHED: 0}, holder="dash")

    assert api.get(f"/tables/{table_path(ORDERS)}/retention").json() == {
        "table": ORDERS,
        "oldest_protected_snapshot_id": 0,
        "protected": [
            {"snapshot_id": 0, "reason": "lease:dash"},
            {"snapshot_id": 1, "reason": f"in_flight:enrich@{b2}:previous_snapshot_id"},
            {"snapshot_id": 1, "reason": f"strong_version@{b1}"},
            {"snapshot_id": 2, "reason": f"in_flight:enrich@{b2}:snapshot_id"},
            {"snapshot_id": 2, "reason": "newest"},
        ],
    }
    assert api.delete(f"/leases/{held['lease_id']}").status_code == 204
    after = api.get(f"/tables/{table_path(ORDERS)}/retention").json()
    assert after["oldest_protected_snapshot_id"] == 1
    assert "lease:dash" not in [p["reason"] for p in after["protected"]]

    assert api.post(f"/jobs/enrich/barriers/{b2}/commit", json={"snapshots": {ENRICHED: 1}}).is_success
    assert api.get(f"/tables/{table_path(ORDERS)}/retention").json()["protected"] == [
        {"snapshot_id": 2, "reason": "newest"},
        {"snapshot_id": 2, "reason": f"strong_version@{b2}"},
    ]
    assert api.get(f"/tables/{table_path(ENRICHED)}/retention").json() == {
        "table": ENRICHED,
        "oldest_protected_snapshot_id": 1,
        "protected": [
            {"snapshot_id": 1, "reason": "newest"},
            {"snapshot_id": 1, "reason": f"strong_version@{b2}"},
        ],
    }
