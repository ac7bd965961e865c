"""Two real `metaservice serve` processes on one database, with pause points armed from the test
(metaservice/failpoints.py): an interleaving between two statements of one request, made exact."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from metaservice import failpoints
from metaservice.db import migrate
from tests import support
from tests.interleavings.harness import Pausepoints, Servers


@pytest.fixture(scope="module", name="servers_pair")
def fx_servers_pair(admin_url: str, worker_id: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    url = support.fresh_database(admin_url, f"ms_interleave_{worker_id}")
    migrate.upgrade(url)
    folder = tmp_path_factory.mktemp("pausepoints")
    log = folder / "servers.log"
    processes = [
        support.ServerProcess(url, env={failpoints.PAUSE_ENV: str(folder)}, log_path=log).start() for _ in range(2)
    ]
    servers = Servers(processes, Pausepoints(folder), url)
    try:
        yield servers
    finally:
        servers.close()
        for process in processes:
            process.stop()


@pytest.fixture(name="servers")
def fx_servers(servers_pair: Servers) -> Iterator[Servers]:
    """The module's two servers, every table emptied after the test."""
    yield servers_pair
    for leftover in servers_pair.pause.directory.glob("*.armed"):
        leftover.unlink()
    support.truncate(servers_pair.database_url)
