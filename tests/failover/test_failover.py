"""A PostgreSQL failover under load with two server replicas that are never restarted.

A primary and a synchronous streaming standby (tests/failover/cluster.py), two `metaservice serve` processes, the
diamond pipeline driven over HTTP through both (tests/failover/load.py); then `kill -9` of the primary, `pg_ctl
promote` of the standby, and the old primary re-cloned as the new standby. How the servers reach the primary is
the variant:

- `multi-host`: a libpq multi-host URL with `target_session_attrs=read-write`;
- `proxy-at-once`: one address (tests/failover/balancer.py) moved to the new primary as it is promoted;
- `proxy-late`: the address still points at the old primary when it returns as a read-only standby, and moves
  only once the servers have met it there;
- `vanish`: the primary's host disappears without closing a connection (a network cut), then the address moves.

In every variant: every server writes again within 10 s of the promotion (of the move, when late; the time the
re-cloned standby takes to stream, without which a synchronous primary takes no write, is not the servers' and
is printed apart), no
acknowledged barrier or commit is lost, barriers never go back, no answer is a 500, and every freshness waiter is
answered within 2 s of the commit that satisfies it. Each variant prints its recovery time per server.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metaservice.db import migrate
from tests import support
from tests.failover.balancer import Balancer
from tests.failover.cluster import Cluster, replicated
from tests.failover.load import Load, check

pytestmark = [pytest.mark.slow, pytest.mark.crash, pytest.mark.xdist_group("failover")]

RECOVERY_BOUND = 10.0
# Server settings an operator of a replicated database would choose: a statement PostgreSQL has not answered in
# 5 s is not coming back (the server's deadline follows from these), connection attempts give up after 2 s.
SERVER_ENV = {
    "METASERVICE_STATEMENT_TIMEOUT_MS": "5000",
    "METASERVICE_LOCK_TIMEOUT_MS": "3000",
    "METASERVICE_CONNECT_TIMEOUT": "2",
    "METASERVICE_POOL_TIMEOUT": "3",
    "METASERVICE_POOL_SIZE": "8",
    "METASERVICE_DEAD_CONNECTION_SECONDS": "6",
}
VARIANTS = ("multi-host", "proxy-at-once", "proxy-late", "vanish")


@pytest.fixture(scope="module", name="cluster")
def fx_cluster() -> Iterator[Cluster]:
    with replicated(synchronous=True) as cluster:
        migrate.upgrade(cluster.primary.url("metaservice"))
        yield cluster


def _progress(load: Load, commits: int, *, timeout: float, what: str) -> None:
    target = len(load.record.commits) + commits
    support.wait_until(lambda: len(load.record.commits) >= target, timeout=timeout, what=what)


@pytest.mark.parametrize("variant", VARIANTS)
def test_failover_under_load(cluster: Cluster, variant: str, tmp_path: Path) -> None:
    support.truncate(cluster.primary.url("metaservice"))
    old, new = cluster.primary, cluster.standby
    balancer = None if variant == "multi-host" else Balancer(old.port).start()
    if balancer is None:
        url = (
            f"postgresql://postgres@127.0.0.1:{old.port},127.0.0.1:{new.port}/metaservice"
            "?target_session_attrs=read-write"
        )
    else:
        url = f"postgresql://postgres@127.0.0.1:{balancer.port}/metaservice"
    log = tmp_path / "servers.log"
    servers = [support.ServerProcess(url, env=SERVER_ENV, log_path=log) for _ in range(2)]
    try:
        for server in servers:
            server.start()
        load = Load([server.base_url for server in servers])
        load.register()
        with load.running():
            _progress(load, 8, timeout=60, what="the pipeline to run before the failover")
            if variant == "vanish":
                assert balancer is not None
                balancer.vanish()
            killed = time.monotonic()
            promoted = cluster.failover_kill_and_promote()
            since, wall = promoted, time.time()
            if balancer is not None and variant != "proxy-late":
                balancer.point(new.port)
            rejoined = cluster.rejoin_old_primary()
            if variant == "proxy-late":
                assert balancer is not None
                # the servers meet the old primary back as a read-only standby before the address moves
                refused = load.record.statuses[503]
                support.wait_until(
                    lambda: load.record.statuses[503] >= refused + 20 or bool(load.record.errors),
                    timeout=30,
                    what="requests answered while the address points at a standby",
                )
                balancer.point(new.port)
                since, wall = time.monotonic(), time.time()
            support.wait_until(
                lambda: len(load.first_write_after(since, wall)) == len(servers),
                timeout=60,
                what="every server to write again",
            )
            recovery = load.first_write_after(since, wall)
            # A synchronous primary takes no write until a standby streams: the servers' own share of the
            # recovery starts once the database can write again (the re-clone's time depends on the machine).
            writable = max(since, rejoined)
            share = {server: since + seconds - writable for server, seconds in recovery.items()}
            _progress(load, 8, timeout=60, what="the pipeline to run after the failover")
        recovered_at = since + max(recovery.values())
        problems = check(load.record, cluster.primary.url("metaservice"), recovered_at=recovered_at)
    finally:
        for server in servers:
            server.stop()
        if balancer is not None:
            balancer.close()
    figures = ", ".join(
        f"server {i + 1} {seconds:.2f}s ({share[i]:.2f}s after the standby streamed)"
        for i, seconds in sorted(recovery.items())
    )
    print(
        f"\nfailover [{variant}]: kill+promote {promoted - killed:.2f}s, old primary re-cloned as the synchronous "
        f"standby {rejoined - promoted:.2f}s after the promotion; writes again after {figures} (from the "
        f"{'move' if variant == 'proxy-late' else 'promotion'}); answers {dict(load.record.statuses)}, "
        f"wire errors {dict(load.record.wire_errors)}, {len(load.record.barriers)} barriers, "
        f"{len(load.record.commits)} commits, {len(load.record.waiters)} waiters"
    )
    assert not problems, "\n".join(problems[:30]) + f"\n(server log: {log})"
    assert max(share.values()) <= RECOVERY_BOUND, (recovery, share)
