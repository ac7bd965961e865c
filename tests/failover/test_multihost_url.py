"""libpq's multi-host URL (`postgresql://u@host1:port1,host2:port2/db`) works wherever a database URL is accepted:
`migrate` and `token` here, `serve` in test_failover.py (multi-host variant), the compose file in
tests/test_deployment.py. SQLAlchemy's URL parser cannot read it; the commands hand it to libpq.

The first host is a port where nothing listens (a primary that is down), the second reaches the test PostgreSQL
through the TCP proxy of the failure-injection tests (it listens on a unix socket only).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from tests import support
from tests.faults.proxy import FaultProxy, Upstream

pytestmark = [pytest.mark.xdist_group("failover")]


@pytest.fixture(name="multihost_url")
def fx_multihost_url(admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ms_multihost_{worker_id}"
    support.fresh_database(admin_url, name)
    with FaultProxy(Upstream.of(admin_url)) as proxy:
        secret = f":{proxy.upstream.password}" if proxy.upstream.password else ""
        down = support.free_port()
        yield f"postgresql://{proxy.upstream.user}{secret}@127.0.0.1:{down},127.0.0.1:{proxy.port}/{name}"
    support.drop_database(admin_url, name)


def metaservice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "metaservice", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_migrate_and_token_accept_a_multi_host_url(multihost_url: str) -> None:
    migrated = metaservice("migrate", "--database-url", multihost_url)
    assert migrated.returncode == 0, migrated.stderr
    created = metaservice("token", "create", "ops", "--role", "admin", "--database-url", multihost_url)
    assert created.returncode == 0, created.stderr
    listed = metaservice("token", "list", "--database-url", multihost_url)
    assert listed.returncode == 0 and "ops" in listed.stdout, listed.stderr
    with psycopg.connect(multihost_url) as conn:  # the second host got it all
        assert conn.execute("SELECT count(*) FROM api_tokens WHERE name = 'ops'").fetchone() == (1,)


def test_a_multi_host_url_without_a_primary_is_one_line_with_the_password_hidden() -> None:
    down = [support.free_port() for _ in range(2)]
    url = f"postgresql://u:s3cret@127.0.0.1:{down[0]},127.0.0.1:{down[1]}/metaservice"
    failed = metaservice("migrate", "--database-url", url)
    assert failed.returncode == 1
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith("error: cannot connect to a primary at postgresql://u:***@127.0.0.1:"), line
    assert "s3cret" not in failed.stderr
