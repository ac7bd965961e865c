"""Shared fixtures: a real PostgreSQL (embedded by default), one migrated database and one real server per
xdist worker, and a plain HTTP client against it. Tables are truncated after each test.

The embedded PostgreSQL under `.test-pg` belongs to the run: the controlling pytest process (xdist's controller,
or the only process without xdist) takes a handle on it at session start and releases it last, after the
workers exited, which stops it unless another live process (a concurrent run) still holds a handle.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from metaservice.db import embedded, migrate
from tests import support

_TEST_POSTGRES = pytest.StashKey[Any]()


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller, not an xdist worker
        session.config.stash[_TEST_POSTGRES] = support.hold_test_postgres()


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(_TEST_POSTGRES, None)
    if server is not None:
        embedded.stop(server)


@pytest.fixture(autouse=True)
def _isolate_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's METASERVICE_* configuration (only the test database override)."""
    for name in list(os.environ):
        if name.startswith("METASERVICE_") and name not in (
            "METASERVICE_TEST_DATABASE_URL",
            "METASERVICE_TEST_PG_DIR",
            "METASERVICE_REQUIRE_BROWSER",
        ):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session", name="admin_url")
def fx_admin_url() -> str:
    return support.admin_url()


@pytest.fixture(scope="session", name="worker_id")
def fx_worker_id(request: pytest.FixtureRequest) -> str:
    return str(getattr(request.config, "workerinput", {}).get("workerid", "main"))


@pytest.fixture(scope="session", name="database_url")
def fx_database_url(admin_url: str, worker_id: str) -> str:
    """An empty database for this xdist worker, brought to head by the real migrations."""
    url = support.fresh_database(admin_url, f"metaservice_test_{worker_id}")
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session", name="server")
def fx_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[support.ServerProcess]:
    """One real `metaservice serve` (uvicorn over HTTP) per worker, shared by the tests of that worker."""
    log = Path(tmp_path_factory.mktemp("server")) / "server.log"
    env = {"METASERVICE_METRICS_REFRESH_SECONDS": "0.2"}  # /metrics figures are read in the background
    server = support.ServerProcess(database_url, env=env, log_path=log).start()
    yield server
    server.stop()


@pytest.fixture(name="api")
def fx_api(server: support.ServerProcess, database_url: str) -> Iterator[httpx.Client]:
    """An HTTP client to the worker's server; every table is emptied after the test."""
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        yield client
    support.truncate(database_url)
