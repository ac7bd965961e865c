"""Trust boundaries between teams (issue 13): one team's job token never changes what another team's jobs read.

A real `metaservice serve --auth` with METASERVICE_METRICS_AUTH, tokens made by the real CLI. Team A's job token
acts for `team-a.*` jobs and may write tables under `lake.team_a.*` and `lake.raw.*`; team B's acts for
`team-b.*` and writes `lake.team_b.*`.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from metaservice.db import migrate
from tests import support
from tests.support import assert_problem, create_token, request_as

pytestmark = pytest.mark.xdist_group("auth")

CUSTOMERS = "lake.raw.customers"  # a root team B reads


@pytest.fixture(scope="module", name="teams_database")
def fx_teams_database(admin_url: str, worker_id: str) -> str:
    return support.fresh_database(admin_url, f"ms_teams_{worker_id}")


@pytest.fixture(scope="module", name="teams")
def fx_teams(teams_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    url = teams_database
    migrate.upgrade(url)
    tokens = {
        "admin": create_token(url, "ops", "admin"),
        "a": create_token(url, "team-a", "job", "team-a.*", tables=("lake.team_a.*", "lake.raw.*")),
        "b": create_token(url, "team-b", "job", "team-b.*", tables=("lake.team_b.*",)),
        "reader": create_token(url, "dashboards", "reader"),
    }
    log = tmp_path_factory.mktemp("teams") / "server.log"
    env = {"METASERVICE_AUTH_ENABLED": "true", "METASERVICE_METRICS_AUTH": "true"}
    server = support.ServerProcess(url, env=env, log_path=log).start()
    yield server.base_url, tokens
    server.stop()


@pytest.fixture(autouse=True)
def _empty_after_each_test(teams: tuple[str, dict[str, str]], teams_database: str) -> Iterator[None]:
    """Every test starts from no lineage and no barriers (the tokens stay)."""
    del teams
    yield
    support.truncate(teams_database)


@pytest.fixture(name="team_b_pipeline")
def fx_team_b_pipeline(teams: tuple[str, dict[str, str]]) -> tuple[str, dict[str, str]]:
    """Team B's job reads the root lake.raw.customers (snapshot 3, sealed by a barrier) and writes its own table."""
    base, tokens = teams
    for role, table in (("source", "lake/raw/customers"), ("sink", "lake/team_b/customer_dim")):
        answer = request_as(base, tokens["b"], "POST", f"/register/{role}/team-b.dims/{table}")
        assert answer.status_code in (200, 201), answer.text
    assert (
        request_as(base, tokens["admin"], "POST", "/barriers", json={"root_snapshots": {CUSTOMERS: 3}}).status_code
        == 201
    )
    return base, tokens


def table(base: str, tokens: dict[str, str], name: str) -> httpx.Response:
    return request_as(base, tokens["admin"], "GET", f"/tables/{name.replace('.', '/')}")


def test_a_job_token_registers_sinks_only_inside_its_namespaces(teams: tuple[str, dict[str, str]]) -> None:
    base, tokens = teams
    denied = request_as(base, tokens["a"], "POST", "/register/sink/team-a.etl/lake/team_b/orders")
    assert_problem(denied, 403, "forbidden")
    assert denied.json()["tables"] == ["lake.team_b.orders"] and "namespaces" in denied.json()["detail"]
    assert table(base, tokens, "lake.team_b.orders").status_code == 404  # nothing was created
    assert request_as(base, tokens["admin"], "GET", "/jobs/team-a.etl").status_code == 404
    own = request_as(base, tokens["a"], "POST", "/register/sink/team-a.etl/lake/team_a/orders")
    assert own.status_code == 201, own.text
    # namespaces are matched regardless of case, like table names
    assert request_as(base, tokens["a"], "POST", "/register/sink/team-a.etl/LAKE/TEAM_A/Other").status_code == 201


def test_a_job_token_cannot_take_over_a_root_another_team_reads(team_b_pipeline: tuple[str, dict[str, str]]) -> None:
    base, tokens = team_b_pipeline
    before = table(base, tokens, CUSTOMERS).json()
    denied = request_as(base, tokens["a"], "POST", "/register/sink/team-a.evil/lake/raw/customers")
    assert_problem(denied, 403, "forbidden")
    assert denied.json()["readers"] == ["team-b.dims"]
    after = table(base, tokens, CUSTOMERS).json()
    assert (after["kind"], after["writer"]) == ("root", None) and after == before
    # the admin's reports of the root keep working, and team B keeps processing the real snapshot
    report = request_as(base, tokens["admin"], "POST", "/tables/lake/raw/customers/snapshots", json={"snapshot_id": 4})
    assert report.status_code == 200, report.text
    decision = request_as(base, tokens["b"], "POST", "/jobs/team-b.dims/barriers/next", json={})
    assert decision.status_code == 200 and decision.json()["inputs"][CUSTOMERS]["snapshot_id"] == 4


def test_next_reports_only_roots_its_own_job_reads(team_b_pipeline: tuple[str, dict[str, str]]) -> None:
    base, tokens = team_b_pipeline
    assert request_as(base, tokens["a"], "POST", "/register/source/team-a.enrich/lake/raw/orders").status_code == 201
    barriers = request_as(base, tokens["admin"], "GET", "/barriers").json()["barriers"]
    forged = {"root_snapshots": {CUSTOMERS: 9223372036854775807}}
    denied = request_as(base, tokens["a"], "POST", "/jobs/team-a.enrich/barriers/next", json=forged)
    assert_problem(denied, 403, "forbidden")
    assert denied.json()["tables"] == [CUSTOMERS]
    assert table(base, tokens, CUSTOMERS).json()["latest_snapshot_id"] == 3  # the value did not stick
    assert (
        request_as(base, tokens["admin"], "GET", "/barriers").json()["barriers"] == barriers
    )  # and nothing was issued
    decision = request_as(base, tokens["b"], "POST", "/jobs/team-b.dims/barriers/next", json={}).json()
    assert decision["inputs"][CUSTOMERS]["snapshot_id"] == 3


def test_table_names_are_unique_regardless_of_case(team_b_pipeline: tuple[str, dict[str, str]]) -> None:
    base, tokens = team_b_pipeline
    variant = request_as(base, tokens["admin"], "POST", "/register/sink/team-a.x/LAKE/TEAM_B/CUSTOMER_DIM")
    assert_problem(variant, 409, "table_name_conflict")
    assert variant.json()["registered"] == "lake.team_b.customer_dim"
    assert request_as(base, tokens["admin"], "GET", "/jobs/team-a.x").status_code == 404
    assert table(base, tokens, "lake.team_b.customer_dim").json()["writer"] == "team-b.dims"


def test_leases_belong_to_whoever_created_them(team_b_pipeline: tuple[str, dict[str, str]]) -> None:
    base, tokens = team_b_pipeline
    body = {"holder": "ops-report", "snapshots": {CUSTOMERS: 3}, "ttl_seconds": 600}
    admins = request_as(base, tokens["admin"], "POST", "/leases", json=body).json()
    readers = request_as(base, tokens["reader"], "POST", "/leases", json={**body, "holder": "dashboard"}).json()
    assert (admins["owner"], readers["owner"]) == ("ops", "dashboards")
    assert_problem(request_as(base, tokens["reader"], "DELETE", f"/leases/{admins['lease_id']}"), 403, "forbidden")
    assert_problem(request_as(base, tokens["reader"], "POST", f"/leases/{admins['lease_id']}/renew"), 403, "forbidden")
    assert request_as(base, tokens["admin"], "GET", f"/leases/{admins['lease_id']}").status_code == 200  # still live
    mine = request_as(base, tokens["reader"], "GET", "/leases").json()["leases"]
    assert [lease["lease_id"] for lease in mine] == [readers["lease_id"]]
    everything = request_as(base, tokens["admin"], "GET", "/leases").json()["leases"]
    assert {lease["lease_id"] for lease in everything} >= {admins["lease_id"], readers["lease_id"]}
    assert request_as(base, tokens["reader"], "DELETE", f"/leases/{readers['lease_id']}").status_code == 204
    assert request_as(base, tokens["admin"], "DELETE", f"/leases/{admins['lease_id']}").status_code == 204


def test_metrics_can_require_a_token(teams: tuple[str, dict[str, str]]) -> None:
    base, tokens = teams
    assert_problem(request_as(base, None, "GET", "/metrics"), 401, "unauthorized")
    scraped = request_as(base, tokens["reader"], "GET", "/metrics")
    assert scraped.status_code == 200 and "metaservice_db_pool_size" in scraped.text
    assert request_as(base, None, "GET", "/healthz").status_code == 200
