"""/metrics' database figures are read and rendered by a process of the server's own (metaservice/metrics_process.py),
never by the process serving the protocol; a figures process that dies is replaced, and none outlives its server."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from metaservice.db import migrate
from tests import support
from tests.support import scrape, scrape_once


def _figures_process(server: support.ServerProcess) -> psutil.Process:
    """The figures process of the server's one worker (waits for it: it is started in the lifespan)."""
    assert server.process is not None
    server_pid = server.process.pid
    found: list[psutil.Process] = []

    def started() -> bool:
        found[:] = [
            p
            for p in psutil.Process(server_pid).children(recursive=True)
            if "metaservice.metrics_process" in p.cmdline()
        ]
        return len(found) == 1

    support.wait_until(started, timeout=30, what="one figures process")
    return found[0]


def _backends(url: str, application: str) -> set[int]:
    """The server processes of PostgreSQL serving the connections to `url`'s database named `application`."""
    with psycopg.connect(url, autocommit=True) as conn:
        query = "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()"
        return {pid for (pid,) in conn.execute(query, (application,))}


@pytest.fixture(name="figures_url")
def fx_figures_url(admin_url: str, worker_id: str) -> str:
    """A database of these tests' own: no other server (the worker's shared one) has a figures process on it."""
    url = support.fresh_database(admin_url, f"ms_figures_{worker_id}")
    migrate.upgrade(url)
    return url


@pytest.fixture(name="figures_server")
def fx_figures_server(figures_url: str, tmp_path: Path) -> Iterator[support.ServerProcess]:
    env = {"METASERVICE_METRICS_REFRESH_SECONDS": "0.2"}
    server = support.ServerProcess(figures_url, env=env, log_path=tmp_path / "server.log").start()
    try:
        yield server
    finally:
        server.stop()


def test_the_figures_are_read_by_a_process_of_their_own(
    figures_server: support.ServerProcess, figures_url: str
) -> None:
    """The refresh's connection belongs to the figures process, not to the process that serves requests: it ends
    with the figures process while the server's own connections stay. The figures' Python (in proportion to the
    catalog) never competes with the protocol for the interpreter."""
    child = _figures_process(figures_server)
    with httpx.Client(base_url=figures_server.base_url, timeout=30) as api:
        api.post("/barriers").raise_for_status()
        assert scrape(api)["metaservice_barriers_issued_total"][0].value == 1
        figures = _backends(figures_url, "metaservice-figures")
        serving = _backends(figures_url, "metaservice")
        assert len(figures) == 1 and serving
        assert child.nice() > psutil.Process(child.ppid()).nice(), "the figures yield the CPU to the server"

        child.kill()
        support.wait_until(
            lambda: not figures & _backends(figures_url, "metaservice-figures"),
            timeout=30,
            what="the figures' connection to end with the figures process",
        )
        assert serving <= _backends(figures_url, "metaservice"), "the server's connections stayed"
        assert api.get("/readyz").status_code == 200


def test_a_killed_figures_process_is_replaced_and_scrapes_go_on(figures_server: support.ServerProcess) -> None:
    child = _figures_process(figures_server)
    with httpx.Client(base_url=figures_server.base_url, timeout=30) as api:
        api.post("/barriers").raise_for_status()
        before = scrape(api)
        child.kill()
        child.wait(timeout=10)
        during = scrape_once(api)  # answered at once, from the last figures held
        assert during["metaservice_barriers_issued_total"][0].value == 1
        assert "metaservice_figures_read_timestamp_seconds" in before

        replacement = _figures_process(figures_server)
        assert replacement.pid != child.pid
        api.post("/barriers").raise_for_status()
        after = scrape(api)  # read after the second barrier: by the new figures process
    assert after["metaservice_barriers_issued_total"][0].value == 2


@pytest.mark.parametrize("how", ["kill -9", "stop"])
def test_no_figures_process_outlives_its_server(figures_server: support.ServerProcess, how: str) -> None:
    """Killed with -9 (only the server, not its group) or stopped, the server leaves no figures process behind: the
    child ends when its input closes."""
    child = _figures_process(figures_server)
    assert figures_server.process is not None
    if how == "kill -9":
        os.kill(child.ppid(), signal.SIGKILL)
    else:
        figures_server.stop()
    try:
        child.wait(timeout=30)
    except psutil.TimeoutExpired:
        pytest.fail(f"the figures process {child.pid} outlived its server")
    if how == "stop":  # the group's SIGTERM reached the child too: it waited for its server to close its input
        assert figures_server.log_path is not None
        assert "the figures process ended" not in figures_server.log_path.read_text()
