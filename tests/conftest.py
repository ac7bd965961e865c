"""Shared fixtures: a real PostgreSQL (embedded by default), one migrated database and one real server per
xdist worker, and a plain HTTP client against it. Tables are truncated after each test.

Markers follow the directory: every test under tests/spark and tests/streaming is `spark`, under tests/browser
`browser`, under tests/crash and tests/faults `crash` (a Spark test that kills a driver may be `crash` as well),
and a test elsewhere carrying one of these markers is refused (move it).
`make test-fast` deselects them, and no test that is not `spark` may start a JVM: a test that does fails, unless a
`spark` test of the same process started one before it.

The embedded PostgreSQL under `.test-pg` belongs to the run: the controlling pytest process (xdist's controller,
or the only process without xdist) takes a handle on it at session start and releases it last, after the
workers exited, which stops it unless another live process (a concurrent run) still holds a handle.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from metaservice.db import embedded, migrate
from tests import support

_TEST_POSTGRES = pytest.StashKey[Any]()
_SPARK_RAN = pytest.StashKey[bool]()
TESTS = Path(__file__).resolve().parent
DIRECTORY_MARKERS = {
    "spark": "spark",
    "streaming": "spark",
    "browser": "browser",
    "crash": "crash",
    "faults": "crash",
    "failover": "crash",
}


def directory_marker(path: Path) -> str | None:
    """The marker every test in `path` carries because of the directory it is in (None: no such directory)."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:  # a test file outside tests/ (a suite a test writes and runs)
        return None
    return DIRECTORY_MARKERS.get(parts[0]) if len(parts) > 1 else None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    misplaced = []
    for item in items:
        if not item.path.resolve().is_relative_to(TESTS):
            continue  # a suite a test writes and runs elsewhere
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.id in getattr(getattr(item, "module", None), "SOAK_ONLY", ()):
            item.add_marker(pytest.mark.soak)  # a cross product's rest: `make test` runs a covering subset
        marker = directory_marker(item.path)
        if marker is not None:
            item.add_marker(marker)  # (a Spark test that kills a driver is `crash` too)
            continue
        for name in set(DIRECTORY_MARKERS.values()):
            if item.get_closest_marker(name) is not None:
                misplaced.append(f"{item.nodeid} is marked {name!r}")
    if misplaced:
        homes = ", ".join(f"tests/{d}: {m}" for d, m in DIRECTORY_MARKERS.items())
        raise pytest.UsageError(f"markers follow the directory ({homes}); move these tests: {'; '.join(misplaced)}")


def jvm_started() -> str | None:
    """What shows that this process started a JVM: pyspark's gateway (it outlives `SparkSession.stop`), or a
    `java` process among its descendants. None when neither does."""
    context = sys.modules.get("pyspark.context")
    if context is not None and getattr(context.SparkContext, "_gateway", None) is not None:
        return "pyspark launched its JVM gateway in this process"
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "java":
                return f"a java process (pid {child.pid}) runs under this process"
        except psutil.NoSuchProcess:
            continue
    return None


@pytest.fixture(autouse=True)
def _no_jvm_outside_spark_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that is not `spark` and started a JVM (`make test-fast` must start none)."""
    stash = request.config.stash
    if request.node.get_closest_marker("spark") is not None:
        stash[_SPARK_RAN] = True
    yield
    if not stash.get(_SPARK_RAN, False) and (evidence := jvm_started()) is not None:
        pytest.fail(f"{request.node.nodeid} is not a spark test (tests/spark) but started a JVM: {evidence}")


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
