"""The command line answers every user mistake with one line on stderr and a non-zero exit, never a traceback
(issue 13, "Lifecycle"). Real `metaservice` processes against a real database of this worker."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from metaservice.db import migrate
from tests import support


def metaservice(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("METASERVICE_")}
    return subprocess.run(
        [sys.executable, "-m", "metaservice", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str], *names: str) -> str:
    """Assert a failed command that said why in exactly one line naming each of `names`; return the line."""
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert result.stdout == "", result.stdout  # no secret, no partial output
    return lines[0]


@pytest.fixture(scope="module", name="cli_url")
def fx_cli_url(admin_url: str, worker_id: str) -> str:
    """A migrated database of its own: token names here never meet those of other tests."""
    url = support.fresh_database(admin_url, f"metaservice_cli_{worker_id}")
    migrate.upgrade(url)
    return url


@pytest.fixture(name="unreachable_url")
def fx_unreachable_url() -> str:
    return f"postgresql://postgres:s3cret@127.0.0.1:{support.free_port()}/metaservice"


def token(cli_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return metaservice("token", *args, "--database-url", cli_url)


def test_token_create_with_a_name_in_use_is_one_line(cli_url: str) -> None:
    created = token(cli_url, "create", "ops-in-use", "--role", "admin")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    again = token(cli_url, "create", "ops-in-use", "--role", "reader")
    one_line_error(again, "'ops-in-use'", "exists")
    listed = token(cli_url, "list").stdout.splitlines()
    assert [line.split("\t")[:2] for line in listed if line.startswith("ops-in-use\t")] == [["ops-in-use", "admin"]]
    assert secret.startswith("ms_")


def test_token_create_with_a_revoked_tokens_name_is_one_line(cli_url: str) -> None:
    assert token(cli_url, "create", "old-dash", "--role", "reader").returncode == 0
    assert token(cli_url, "revoke", "old-dash").returncode == 0
    one_line_error(token(cli_url, "create", "old-dash", "--role", "reader"), "'old-dash'")


def test_revoking_an_unknown_or_revoked_token_is_one_line(cli_url: str) -> None:
    one_line_error(token(cli_url, "revoke", "nosuch"), "'nosuch'")
    assert token(cli_url, "create", "twice", "--role", "reader").returncode == 0
    assert token(cli_url, "revoke", "twice").returncode == 0
    one_line_error(token(cli_url, "revoke", "twice"), "'twice'")


@pytest.mark.parametrize("pattern", ["", "team a/*"])
def test_job_pattern_that_matches_no_job_id_is_refused(cli_url: str, pattern: str) -> None:
    result = token(cli_url, "create", "etl-nothing", "--role", "job", "--job", pattern)
    one_line_error(result, "--job", repr(pattern))
    assert result.returncode == 2
    assert not any(line.startswith("etl-nothing\t") for line in token(cli_url, "list").stdout.splitlines())


def test_job_token_with_a_glob_is_created(cli_url: str) -> None:
    result = token(
        cli_url, "create", "etl-team-a", "--role", "job", "--job", "team-a.*", "--job", "enrich",
        "--tables", "lake.team_a.*",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    listed = [line.split("\t") for line in token(cli_url, "list").stdout.splitlines()]
    assert ["etl-team-a", "job", "team-a.*,enrich", "lake.team_a.*", "active"] in listed


def test_a_table_pattern_that_matches_no_table_is_one_line(cli_url: str) -> None:
    result = token(cli_url, "create", "odd", "--role", "job", "--job", "x", "--tables", "lake/raw/orders")
    one_line_error(result, "--tables", "'lake/raw/orders'")
    assert result.returncode == 2


def test_bad_role_is_one_line(cli_url: str) -> None:
    result = token(cli_url, "create", "who", "--role", "superuser")
    one_line_error(result, "--role", "'superuser'", "admin, job, reader")
    assert result.returncode == 2


@pytest.mark.parametrize(
    "command",
    [
        ("token", "create", "x", "--role", "admin"),
        ("token", "revoke", "x"),
        ("migrate",),
        ("serve", "--port", "65000"),  # never bound: the database is tried first
    ],
)
def test_unreachable_database_is_one_line_without_the_password(unreachable_url: str, command: tuple[str, ...]) -> None:
    line = one_line_error(metaservice(*command, "--database-url", unreachable_url), "cannot connect", "127.0.0.1")
    assert "s3cret" not in line


def test_a_url_that_is_not_postgresql_is_one_line() -> None:
    one_line_error(metaservice("token", "list", "--database-url", "mysql://db/metaservice"), "mysql://")


def test_database_without_the_schema_says_to_migrate(admin_url: str, worker_id: str) -> None:
    bare = support.fresh_database(admin_url, f"metaservice_bare_{worker_id}")
    one_line_error(metaservice("token", "list", "--database-url", bare), "metaservice migrate")


@pytest.mark.parametrize(
    ("args", "env", "names"),
    [
        (("serve", "--workers", "0"), {}, ("--workers",)),
        (("serve",), {"METASERVICE_POOL_SIZE": "many"}, ("METASERVICE_POOL_SIZE", "'many'")),
    ],
)
def test_bad_setting_is_one_line(args: tuple[str, ...], env: dict[str, str], names: tuple[str, ...]) -> None:
    result = metaservice(*args, env=env)
    one_line_error(result, *names)
    assert result.returncode == 2


# --- serve --insecure -------------------------------------------------------------------------------------------------


@pytest.fixture(name="serving")
def fx_serving() -> Iterator[list[support.ServerProcess]]:
    """Servers a test starts; stopped after it, whatever happened."""
    started: list[support.ServerProcess] = []
    yield started
    for server in started:
        server.stop()


@pytest.mark.parametrize("insecure", [True, False])
def test_serve_insecure_logs_a_warning(
    database_url: str, tmp_path: Path, serving: list[support.ServerProcess], insecure: bool
) -> None:
    log = tmp_path / "server.log"
    args = ("--insecure",) if insecure else ()
    server = support.ServerProcess(database_url, log_path=log, args=args)
    serving.append(server)
    server.start()
    assert httpx.get(f"{server.base_url}/jobs", timeout=30).status_code == 200  # it serves, without a token
    warnings = [line for line in log.read_text().splitlines() if " WARNING " in line and "--insecure" in line]
    if insecure:
        assert len(warnings) == 1, log.read_text()
        assert "WITHOUT authentication" in warnings[0] and f"127.0.0.1:{server.port}" in warnings[0]
    else:
        assert warnings == []


def test_refusing_to_serve_without_auth_off_loopback_is_one_line(database_url: str) -> None:
    result = metaservice(
        "serve", "--host", "0.0.0.0", "--port", str(support.free_port()), "--database-url", database_url
    )
    one_line_error(result, "--auth", "--insecure")
    assert result.returncode == 2


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("token", "create"), ("'name'",)),
        (("serve", "--port", "abc"), ("--port",)),
        (("token", "create", "x", "--rol", "admin"), ("--rol", "--role")),
        (("deploy",), ("'deploy'",)),
    ],
)
def test_usage_mistakes_are_one_line(args: tuple[str, ...], names: tuple[str, ...]) -> None:
    result = metaservice(*args)
    one_line_error(result, *names, "--help")
    assert result.returncode == 2


def test_help_still_shows_the_commands() -> None:
    result = metaservice("--help")
    assert result.returncode == 0
    assert all(name in result.stdout for name in ("serve", "migrate", "token"))
