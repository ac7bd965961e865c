"""Fixtures of the failure-injection suite: one migrated database per module, real servers killed on teardown,
and the fault-injecting proxy to PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from metaservice.db import migrate
from tests import support
from tests.faults.proxy import FaultProxy, Upstream


class Servers:
    """Starts real `metaservice serve` processes with logs in one directory; kills what is left at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._started: list[support.ServerProcess] = []

    def start(
        self,
        database_url: str,
        *,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        workers: int = 1,
        timeout: float = 60,
    ) -> support.ServerProcess:
        server = support.ServerProcess(
            database_url,
            workers=workers,
            env=dict(env or {}),
            port=port or support.free_port(),
            log_path=self.log_dir / "servers.log",
        )
        self._started.append(server)
        return server.start(timeout=timeout)

    def kill_all(self) -> None:
        for server in reversed(self._started):
            server.kill()
        self._started.clear()


@pytest.fixture(scope="module", name="faults_database")
def fx_faults_database(request: pytest.FixtureRequest, admin_url: str, worker_id: str) -> Iterator[str]:
    """A migrated database of this module alone (`ms_faults_<module>_<worker>`), dropped after the module."""
    name = f"ms_faults_{request.module.__name__.rsplit('.', 1)[-1].removeprefix('test_')}_{worker_id}"
    url = support.fresh_database(admin_url, name)
    migrate.upgrade(url)
    yield url
    support.drop_database(admin_url, name)


@pytest.fixture(scope="module", name="servers")
def fx_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    servers = Servers(tmp_path_factory.mktemp("faults-servers"))
    yield servers
    servers.kill_all()


@pytest.fixture(scope="module", name="proxy")
def fx_proxy(admin_url: str) -> Iterator[FaultProxy]:
    """A fault-injecting TCP proxy to the test PostgreSQL on a free loopback port."""
    with FaultProxy(Upstream.of(admin_url)) as proxy:
        yield proxy
