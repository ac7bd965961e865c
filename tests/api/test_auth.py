"""Bearer tokens with roles over HTTP against a server started with --auth (issue 6)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from metaservice.db import migrate
from tests import support

pytestmark = pytest.mark.xdist_group("auth")


def create_token(url: str, name: str, role: str, *jobs: str, tables: tuple[str, ...] = ()) -> str:
    command = [sys.executable, "-m", "metaservice", "token", "create", name, "--role", role, "--database-url", url]
    for job in jobs:
        command += ["--job", job]
    for pattern in tables:
        command += ["--tables", pattern]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.strip()


@pytest.fixture(scope="module", name="secured")
def fx_secured(
    admin_url: str, worker_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    url = support.fresh_database(admin_url, f"ms_auth_{worker_id}")
    migrate.upgrade(url)
    tokens = {
        "admin": create_token(url, "ops", "admin"),
        "job": create_token(url, "enrich-runner", "job", "enrich", "team-a.*", tables=("lake.mart.*",)),
        "reader": create_token(url, "dashboard", "reader"),
        "revoked": create_token(url, "old", "reader"),
    }
    subprocess.run(
        [sys.executable, "-m", "metaservice", "token", "revoke", "old", "--database-url", url], check=True, timeout=60
    )
    log = tmp_path_factory.mktemp("auth") / "server.log"
    server = support.ServerProcess(url, env={"METASERVICE_AUTH_ENABLED": "true"}, log_path=log).start()
    yield server.base_url, tokens
    server.stop()


def call(base: str, token: str | None, method: str, path: str, **kwargs: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, base + path, headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]


def assert_problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == code


def test_missing_bad_and_revoked_tokens_get_401(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    for token in (None, "ms_not-a-token", tokens["revoked"]):
        response = call(base, token, "GET", "/jobs")
        assert_problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
    assert call(base, None, "GET", "/healthz").status_code == 200  # probes stay open


def test_job_token_acts_only_for_its_jobs(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    assert call(base, tokens["job"], "POST", "/register/source/enrich/lake/raw/orders").status_code in (200, 201)
    assert call(base, tokens["job"], "POST", "/register/sink/team-a.daily/lake/mart/a").status_code in (200, 201)
    denied = call(base, tokens["job"], "POST", "/register/sink/other/lake/mart/b")
    assert_problem(denied, 403, "forbidden")
    assert "other" in denied.json()["detail"]
    assert call(base, tokens["admin"], "GET", "/jobs/other").status_code == 404  # nothing was created
    assert call(base, tokens["job"], "POST", "/jobs/enrich/barriers/next", json={}).status_code == 200
    assert_problem(call(base, tokens["job"], "POST", "/barriers"), 403, "forbidden")
    assert call(base, tokens["job"], "GET", "/tables").status_code == 200


def test_reader_reads_and_leases_but_never_writes_protocol_state(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    call(base, tokens["admin"], "POST", "/register/source/audit/lake/raw/events")
    assert call(base, tokens["reader"], "GET", "/tables").status_code == 200
    versions = call(base, tokens["reader"], "POST", "/versions", json={"tables": ["lake.raw.events"]})
    assert versions.status_code == 404 and versions.json()["code"] == "no_consistent_version"  # allowed, just empty
    assert_problem(call(base, tokens["reader"], "POST", "/jobs/audit/barriers/next", json={}), 403, "forbidden")
    assert_problem(call(base, tokens["reader"], "POST", "/unregister/audit"), 403, "forbidden")
    assert call(base, tokens["admin"], "GET", "/jobs/audit").json()["is_active"] is True


def test_admin_may_do_everything(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    assert call(base, tokens["admin"], "POST", "/barriers").status_code == 201
    assert call(base, tokens["admin"], "POST", "/register/sink/anyone/lake/mart/z").status_code in (200, 201)


def test_serving_off_loopback_without_auth_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "metaservice", "serve", "--host", "0.0.0.0", "--port", str(support.free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--auth" in result.stderr and "--insecure" in result.stderr
