"""Bearer tokens with roles over HTTP against a server started with --auth (issue 6)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests import support
from tests.support import Token, assert_problem, request_as, secured_server

pytestmark = pytest.mark.xdist_group("auth")

TOKENS = {
    "admin": Token("ops", "admin"),
    "job": Token("enrich-runner", "job", ("enrich", "team-a.*"), tables=("lake.mart.*",)),
    "reader": Token("dashboard", "reader"),
    "revoked": Token("old", "reader"),
}


@pytest.fixture(scope="module", name="secured")
def fx_secured(
    admin_url: str, worker_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    database, log = f"ms_auth_{worker_id}", tmp_path_factory.mktemp("auth") / "server.log"
    with secured_server(admin_url, database, TOKENS, log_path=log, revoked=["revoked"]) as (server, tokens):
        yield server.base_url, tokens


def test_missing_bad_and_revoked_tokens_get_401(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    for token in (None, "ms_not-a-token", tokens["revoked"]):
        response = request_as(base, token, "GET", "/jobs")
        assert_problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
    assert request_as(base, None, "GET", "/healthz").status_code == 200  # probes stay open


def test_job_token_acts_only_for_its_jobs(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    for path in ("/register/source/enrich/lake/raw/orders", "/register/sink/team-a.daily/lake/mart/a"):
        created = request_as(base, tokens["job"], "POST", path)  # a fresh database: each edge is new
        assert created.status_code == 201 and created.json()["created"] is True, created.text
        again = request_as(base, tokens["job"], "POST", path)  # and registering it again changes nothing
        assert again.status_code == 200 and again.json()["created"] is False, again.text
    denied = request_as(base, tokens["job"], "POST", "/register/sink/other/lake/mart/b")
    assert_problem(denied, 403, "forbidden")
    assert "other" in denied.json()["detail"]
    assert request_as(base, tokens["admin"], "GET", "/jobs/other").status_code == 404  # nothing was created
    assert request_as(base, tokens["job"], "POST", "/jobs/enrich/barriers/next", json={}).status_code == 200
    assert_problem(request_as(base, tokens["job"], "POST", "/barriers"), 403, "forbidden")
    assert request_as(base, tokens["job"], "GET", "/tables").status_code == 200


def test_reader_reads_and_leases_but_never_writes_protocol_state(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    request_as(base, tokens["admin"], "POST", "/register/source/audit/lake/raw/events")
    assert request_as(base, tokens["reader"], "GET", "/tables").status_code == 200
    versions = request_as(base, tokens["reader"], "POST", "/versions", json={"tables": ["lake.raw.events"]})
    assert versions.status_code == 404 and versions.json()["code"] == "no_consistent_version"  # allowed, just empty
    assert_problem(request_as(base, tokens["reader"], "POST", "/jobs/audit/barriers/next", json={}), 403, "forbidden")
    assert_problem(request_as(base, tokens["reader"], "POST", "/unregister/audit"), 403, "forbidden")
    assert request_as(base, tokens["admin"], "GET", "/jobs/audit").json()["is_active"] is True


def test_admin_may_do_everything(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    assert request_as(base, tokens["admin"], "POST", "/barriers").status_code == 201
    created = request_as(base, tokens["admin"], "POST", "/register/sink/anyone/lake/mart/z")
    assert created.status_code == 201 and created.json()["created"] is True, created.text


def test_serving_off_loopback_without_auth_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "metaservice", "serve", "--host", "0.0.0.0", "--port", str(support.free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--auth" in result.stderr and "--insecure" in result.stderr
