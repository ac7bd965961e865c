"""A NOTIFY the notifier is sending on a connection to a host that vanished is given up when the database retires
its connections, and sent again at once on a new one (db/listener.py `ChangeNotifier`).

Found in the failover suite's `vanish` variant: the notifier's send had started on the cut connection before the
listener noticed the host was gone. The listener's check retired every connection, but the send kept waiting on
the dead one until its own deadline (`connect_timeout + dead_connection_seconds`), so the first commits after the
failover woke their freshness waiters 2.1 s late.

The interleaving is pinned, not timed: the send is in flight when the connections are retired (psycopg shows the
connection busy with a command), old connections stay cut while new ones reach the database (a balancer that
moved), and the notification is decided by what a listener on the database itself hears. The deadline of the send
is a minute, so without the interruption the notification could not arrive within the 20 s the test allows.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import psycopg
import pytest
from psycopg.pq import TransactionStatus

from metaservice.db.database import Database
from metaservice.db.listener import CHANNEL, ChangeNotifier
from metaservice.settings import Settings
from tests import support
from tests.failover.balancer import Balancer
from tests.faults.proxy import FaultProxy, Upstream

pytestmark = [pytest.mark.xdist_group("failover")]

DEADLINE = 60  # dead_connection_seconds: the send's own deadline is longer than the test waits


@pytest.fixture(name="routes")
def fx_routes(admin_url: str, worker_id: str) -> Iterator[tuple[str, str, Balancer, int]]:
    """(URL through a balancer in front of the test database, the database's own URL, the balancer, the port
    it forwards to)."""
    name = f"ms_notifier_{worker_id}"
    direct = support.fresh_database(admin_url, name)
    with FaultProxy(Upstream.of(admin_url)) as proxy, Balancer(proxy.port) as balancer:
        yield proxy.url(name).replace(f":{proxy.port}/", f":{balancer.port}/"), direct, balancer, proxy.port
    support.drop_database(admin_url, name)


def test_a_retire_interrupts_a_notify_stuck_on_a_vanished_host(routes: tuple[str, str, Balancer, int]) -> None:
    through, direct, balancer, target = routes

    async def main() -> None:
        settings = Settings(database_url=through, dead_connection_seconds=DEADLINE, connect_timeout=2)
        db = Database(settings)
        await db.open()
        notifier = ChangeNotifier(db)
        try:
            async with await psycopg.AsyncConnection.connect(direct, autocommit=True) as listening:
                await listening.execute(f"LISTEN {CHANNEL}")

                async def heard() -> int:
                    return len([n async for n in listening.notifies(timeout=20, stop_after=1)])

                notifier.changed()  # the notifier's connection is made, through the balancer
                assert await heard() == 1
                assert notifier._task is not None
                await notifier._task  # done: nothing left to announce
                assert notifier.sent == 1

                balancer.vanish()  # the host is gone: its connections stay open and silent
                balancer.point(target)  # new connections reach the database (the address moved)
                notifier.changed()
                conn = notifier._conn
                assert conn is not None
                while conn.info.transaction_status != TransactionStatus.ACTIVE:  # the NOTIFY is on the wire
                    await anyio.sleep(0.01)

                db.retire("the test's host vanished", interrupt=True)
                assert await heard() == 1, "the notification was not sent again after the retire"
                await notifier._task
                assert notifier.sent == 2 and notifier.failed == 1
        finally:
            await notifier.close()
            await db.close()

    anyio.run(main)
