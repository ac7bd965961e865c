"""No process outlives the command that started it (issue 13, "Lifecycle").

- `metaservice serve` without a database URL starts the embedded PostgreSQL in its data dir; SIGTERM and SIGINT
  (one worker or two) stop it again.
- A test run (`pytest -n 2`, as `make test` runs it, and plain `pytest`) stops the embedded PostgreSQL its
  workers shared when it ends. The run here uses a data dir of its own (`METASERVICE_TEST_PG_DIR`), never the
  `.test-pg` of the run that executes this test.

Real processes throughout: postgres processes are found by their data dir on the command line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from metaservice.db import embedded
from tests import support

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lifecycle")]


def postgres_of(pgdata: Path) -> list[psutil.Process]:
    """The running postgres processes (postmaster and its children) serving the cluster in `pgdata`."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and str(pgdata) in cmdline:
            found.append(proc)
            found.extend(proc.children(recursive=True))
    return [p for p in found if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def stop_leftovers(data_dir: Path) -> None:
    """Teardown: whatever a failed test left running in `data_dir` is stopped (never another test's server)."""
    if postgres_of(data_dir / "pg"):
        embedded.stop(embedded.start(data_dir))


@pytest.fixture(scope="module", name="data_dir")
def fx_data_dir() -> Iterator[Path]:
    """One embedded cluster for the serve tests of this module (initdb once); nothing of it outlives them."""
    with support.scratch_pg_dir("serve-data") as data_dir:
        yield data_dir
        stop_leftovers(data_dir)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_stops_its_embedded_postgres_on_signal(
    data_dir: Path, tmp_path: Path, workers: int, signum: signal.Signals
) -> None:
    pgdata = data_dir / "pg"
    assert postgres_of(pgdata) == []
    log = tmp_path / "serve.log"
    server = support.ServerProcess(None, data_dir=data_dir, workers=workers, log_path=log)
    try:
        server.start(timeout=180)
        assert httpx.post(f"{server.base_url}/barriers", json={}, timeout=30).status_code == 201  # it really serves
        assert postgres_of(pgdata), "serve did not start the embedded PostgreSQL of its data dir"
        assert server.process is not None
        server.process.send_signal(signum)  # the serve process only, as an init system or a terminal would
        server.process.wait(timeout=90)
        support.wait_until(lambda: postgres_of(pgdata) == [], timeout=30, what="the embedded PostgreSQL to stop")
        assert not (pgdata / "postmaster.pid").exists()
        assert f"stopped embedded PostgreSQL in {pgdata}" in log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        server.kill()
        stop_leftovers(data_dir)


def test_serve_leaves_a_postgres_another_process_still_uses_running(data_dir: Path, tmp_path: Path) -> None:
    """The last user stops it: a server started by someone else (here this test) outlives serve's SIGTERM."""
    pgdata = data_dir / "pg"
    handle = embedded.start(data_dir)
    try:
        server = support.ServerProcess(None, data_dir=data_dir, log_path=tmp_path / "serve.log").start(timeout=180)
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=90)
        assert postgres_of(pgdata), "serve stopped a PostgreSQL that another process still uses"
        assert "keeps running: another process uses it" in (tmp_path / "serve.log").read_text()
    finally:
        assert embedded.stop(handle)
    assert postgres_of(pgdata) == []


@pytest.mark.parametrize("mode", [["-n", "2", "--dist", "loadgroup"], ["-p", "no:xdist"]], ids=["xdist", "plain"])
def test_a_test_run_stops_the_embedded_postgres_its_workers_shared(mode: list[str]) -> None:
    with support.scratch_pg_dir("suite-pg") as test_pg:
        _run_suite_and_check(test_pg, mode)


def _run_suite_and_check(test_pg: Path, mode: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("METASERVICE_", "PYTEST_"))}
    env["METASERVICE_TEST_PG_DIR"] = str(test_pg)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *mode, "tests/api/test_versions.py"],
            cwd=support.REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert " passed" in run.stdout
        assert (test_pg / "pg" / "PG_VERSION").exists()  # the run did use an embedded PostgreSQL of its own
        assert postgres_of(test_pg / "pg") == [], "the test run left its embedded PostgreSQL running"
    finally:
        stop_leftovers(test_pg)
