"""Asynchronous replication: the server refuses to start on it unless told, and a failover that loses the
unreplicated tail never gives a barrier two meanings nor duplicates or loses a row in the jobs' sinks.

One asynchronous cluster (tests/failover/cluster.py) serves the module: the start checks first (async refused,
allowed by the setting, a role that cannot read the standbys' sync state, the same cluster made synchronous for a
moment), then the failover, which uses it up.

The failover: the standby's replication connection runs through the test's balancer (tests/failover/balancer.py),
and `vanish()` stops it forwarding: every byte of WAL written afterwards never reaches the standby (pausing replay
would not do: promotion replays what was received). Two servers with `METASERVICE_ALLOW_ASYNC_REPLICATION`, a
two-job chain on Delta in a local Spark session (root → `clean` appends the root's new rows → `per_key` overwrites
an aggregate), then, frozen: both jobs process and commit a barrier, a barrier and strong reads through both
servers, and a third barrier that `clean` writes but whose commit reaches the new primary only: `kill -9` of the
primary and `pg_ctl promote` of the standby happen just before it. Everything the servers answered while frozen
is lost, and the test knows it from the answers alone.

The barrier clock row is set a day ahead of the database clock before anything runs, as after an old primary whose
clock ran ahead: barriers are then `last + 1`, and the lost tail's numbers are exactly the next ones the new
primary issues unless a floor stops it. So the test fails without the allocation floor (the first barriers after
the failover repeat the lost numbers with other seals and inputs, and `per_key` reuses its lost commit for a
barrier of the same number: rows missing) and without the client's handling of its own undo back to a lost commit
(`clean` refuses to write: `UnexpectedSinkCommit`). It asserts: every (barrier, table) any client was told (seals,
inputs, commits, reads) has one snapshot before and after; every barrier issued after the failover is above every
barrier handed out before; no answer is a 500; the sinks equal a recomputation from the root (0 duplicated, 0
missing rows).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psycopg
import pytest

from metaservice.db import migrate
from metaservice.db.replication import SETTING, inspect
from spark_client import DeltaCatalog, EtlJob, Inputs, MetaServiceClient
from spark_client.models import BarrierDecision, Commit
from spark_client.modes import Append, Overwrite
from tests import support
from tests.failover.balancer import Balancer
from tests.failover.cluster import Cluster, Node, replicated
from tests.spark.conftest import fx_spark  # noqa: F401  (the session's local Spark, for the failover test)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.slow, pytest.mark.crash, pytest.mark.xdist_group("failover")]

ALLOW = {SETTING: "true"}
SERVER_ENV = {
    "METASERVICE_STATEMENT_TIMEOUT_MS": "5000",
    "METASERVICE_LOCK_TIMEOUT_MS": "3000",
    "METASERVICE_CONNECT_TIMEOUT": "2",
    "METASERVICE_POOL_TIMEOUT": "3",
    "METASERVICE_POOL_SIZE": "8",
    "METASERVICE_DEAD_CONNECTION_SECONDS": "6",
    **ALLOW,
}
DAY_AHEAD_US = 86_400 * 1_000_000
ROOT, CLEAN, PER_KEY = "lake.raw.events", "lake.mart.events_clean", "lake.mart.events_per_key"
FEED = "events-feed"


@pytest.fixture(scope="module", name="cluster")
def fx_cluster() -> Iterator[Cluster]:
    with replicated(synchronous=False) as cluster:
        support.wait_until(cluster.primary.streaming, timeout=60, what="the asynchronous standby to stream")
        migrate.upgrade(cluster.primary.url("metaservice"))
        yield cluster


def run(*command: str, url: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A command of this checkout that is expected to end by itself (a refused start)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("METASERVICE_")}
    environment |= {"METASERVICE_DATABASE_URL": url, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", *command], env=environment, capture_output=True, text=True, timeout=120, check=False
    )


# --- refusing to start ---------------------------------------------------------------------------------------------


def test_serve_refuses_an_asynchronous_standby_saying_what_is_at_stake(cluster: Cluster) -> None:
    url = cluster.primary.url("metaservice")
    refused = run("metaservice", "serve", "--port", str(support.free_port()), url=url)
    assert refused.returncode == 1, refused.stderr
    message = refused.stderr.strip().splitlines()[-1]
    assert message.startswith("error: the primary replicates asynchronously (1 standby streaming (sync_state async)")
    assert "acknowledged can be lost when a standby is promoted" in message
    assert "synchronous_standby_names" in message and f"{SETTING}=true" in message
    # the app's lifespan checks too (uvicorn started without `serve`): it never takes a request
    lifespan = run(
        "uvicorn", "metaservice.app:from_environment", "--factory", "--port", str(support.free_port()), url=url
    )
    assert lifespan.returncode != 0
    assert "the primary replicates asynchronously" in lifespan.stderr
    assert "Application startup failed" in lifespan.stderr


def test_with_the_setting_it_serves_and_warns_once(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = support.ServerProcess(cluster.primary.url("metaservice"), env=ALLOW, log_path=log).start()
    try:
        issued = httpx.post(f"{server.base_url}/barriers", timeout=30)
        assert issued.status_code == 201, issued.text
    finally:
        server.stop()
    assert log.read_text().count("serving on asynchronous replication") == 1


def test_a_role_that_cannot_read_the_sync_state_is_judged_by_the_settings(cluster: Cluster, tmp_path: Path) -> None:
    primary = cluster.primary
    with psycopg.connect(primary.url("metaservice"), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS limited")
        conn.execute("CREATE ROLE limited LOGIN")
    limited = f"postgresql://limited@127.0.0.1:{primary.port}/metaservice"
    with psycopg.connect(limited, autocommit=True) as conn:
        seen = inspect(conn)
        assert seen.states == ("?",) and seen.hidden  # one walsender, its columns NULL for this role
        assert seen.asynchronous  # synchronous_standby_names is empty: no standby can be synchronous
    # The same cluster, synchronous for a while: the server starts without the setting.
    set_synchronous(primary, "'*'")
    try:
        support.wait_until(primary.streaming_synchronously, timeout=60, what="the standby to stream synchronously")
        with psycopg.connect(limited, autocommit=True) as conn:
            assert not inspect(conn).asynchronous  # commits wait for the standbys it names
            conn.execute("SET synchronous_commit = local")
            assert inspect(conn).asynchronous  # they do not wait after all
        with psycopg.connect(primary.url("metaservice"), autocommit=True) as conn:
            seen = inspect(conn)
            assert seen.states == ("sync",) and not seen.asynchronous
        log = tmp_path / "server.log"
        server = support.ServerProcess(primary.url("metaservice"), log_path=log).start()
        server.stop()
        assert "asynchronous" not in log.read_text()
    finally:
        set_synchronous(primary, None)
    support.wait_until(lambda: not synchronous_now(primary), timeout=60, what="the standby to be asynchronous again")


def test_without_a_standby_it_serves(database_url: str, server: support.ServerProcess) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        seen = inspect(conn)
    assert seen.states == () and not seen.asynchronous
    assert httpx.get(f"{server.base_url}/readyz", timeout=10).status_code == 200


def set_synchronous(primary: Node, names: str | None) -> None:
    with psycopg.connect(primary.url(), autocommit=True) as conn:
        if names is None:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        else:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = {names}")
        conn.execute("SELECT pg_reload_conf()")


def synchronous_now(primary: Node) -> bool:
    with psycopg.connect(primary.url(), autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('synchronous_standby_names') <> ''").fetchone()
    return bool(row and row[0]) or primary.streaming_synchronously()


# --- the failover --------------------------------------------------------------------------------------------------


class Told:
    """What clients were told: each (barrier, table) → snapshot, from seals, `next` inputs, commits and reads."""

    def __init__(self) -> None:
        self.meaning: dict[tuple[int, str], tuple[int | None, str]] = {}
        self.conflicts: list[str] = []
        self.handed: list[int] = []  # every barrier any answer named, in order
        self.statuses: Counter[int] = Counter()

    def tell(self, barrier: int, table: str, snapshot: int | None, where: str) -> None:
        self.handed.append(barrier)
        first = self.meaning.setdefault((barrier, table), (snapshot, where))
        if first[0] != snapshot:
            self.conflicts.append(
                f"barrier {barrier}: {table}@{first[0]} ({first[1]}), then {table}@{snapshot} ({where})"
            )

    def issue(self, base: str) -> int:
        """POST /barriers through `base`; the barrier issued."""
        answer = self.answered(httpx.post(f"{base}/barriers", headers={"Idempotency-Key": str(uuid.uuid4())}))
        assert answer.status_code == 201, answer.text
        body = answer.json()
        self.handed.append(int(body["barrier"]))
        for table, snapshot in body["sealed"].items():
            self.tell(int(body["barrier"]), table, int(snapshot), f"POST /barriers through {base}")
        return int(body["barrier"])

    def read(self, base: str) -> int:
        """A strong read of both sinks through `base`; its barrier."""
        body = {"tables": [CLEAN, PER_KEY], "consistency": "strong"}
        answer = self.answered(httpx.post(f"{base}/versions", json=body, timeout=30))
        assert answer.status_code == 200, answer.text
        versions = answer.json()
        for table, snapshot in versions["versions"].items():
            self.tell(int(versions["barrier"]), table, int(snapshot), f"strong read through {base}")
        return int(versions["barrier"])

    def answered(self, response: httpx.Response) -> httpx.Response:
        self.statuses[response.status_code] += 1
        return response


class RecordingClient(MetaServiceClient):
    """The job's real client, noting what `next` and commit told the job; `before_commit` runs once, just before
    the next commit is sent (the test's failover)."""

    def __init__(self, base_url: str, told: Told) -> None:
        super().__init__(base_url)
        self.told = told
        self.before_commit: Callable[[], object] | None = None

    def next_barrier(
        self,
        job_id: str,
        root_snapshots: Mapping[str, int] | None = None,
        *,
        start: Any = None,
        openlineage_parent: str | None = None,
    ) -> BarrierDecision:
        decision = super().next_barrier(job_id, root_snapshots, start=start, openlineage_parent=openlineage_parent)
        if decision.action == "process" and decision.barrier is not None:
            for table, snapshot in decision.inputs.items():
                self.told.tell(decision.barrier, table, snapshot.snapshot_id, f"next of {job_id}")
        return decision

    def commit_barrier(
        self, job_id: str, barrier: int, snapshots: Mapping[str, int], *, openlineage_parent: str | None = None
    ) -> Commit:
        if self.before_commit is not None:
            hook, self.before_commit = self.before_commit, None
            hook()
        commit = super().commit_barrier(job_id, barrier, snapshots, openlineage_parent=openlineage_parent)
        for table, snapshot in snapshots.items():
            self.told.tell(barrier, table, snapshot, f"commit of {job_id}")
        return commit


def clean(inputs: Inputs) -> Mapping[str, DataFrame]:
    from pyspark.sql import functions as F

    return {CLEAN: inputs.changes(ROOT).filter(F.col("amount") > 0)}


def per_key(inputs: Inputs) -> Mapping[str, DataFrame]:
    from pyspark.sql import functions as F

    per = inputs[CLEAN].groupBy("key").agg(F.count("*").alias("events"), F.sum("amount").alias("amount"))
    return {PER_KEY: per}


def ingest(spark: SparkSession, lake: DeltaCatalog, batch: int) -> int:
    """Append batch `batch` to the root (an outside writer, tagged: a replay appends nothing); its snapshot."""
    rows = [(batch * 100 + i, f"k{i % 3}", float(i - 1)) for i in range(6)]  # amount 0 or less: filtered out
    frame = spark.createDataFrame(rows, "id long, key string, amount double")
    return lake.write(spark, frame, ROOT, mode=Append(), app_id=FEED, barrier=batch)


def route_replication_through(balancer: Balancer, standby: Node) -> None:
    """The standby's WAL receiver connects through `balancer` from now on (a reload restarts it)."""
    conninfo = f"host=127.0.0.1 port={balancer.port} user=postgres application_name={standby.name}"
    with psycopg.connect(standby.url(), autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET primary_conninfo = '{conninfo}'")
        conn.execute("SELECT pg_reload_conf()")

    def streaming_through_it() -> bool:
        with psycopg.connect(standby.url(), autocommit=True) as conn:
            row = conn.execute("SELECT status, conninfo FROM pg_stat_wal_receiver").fetchone()
        return row is not None and row[0] == "streaming" and f"port={balancer.port}" in str(row[1])

    support.wait_until(streaming_through_it, timeout=60, what="the standby to stream through the balancer")


def replayed_everything(primary: Node, standby: Node) -> None:
    """Wait until the standby replayed every WAL record the primary wrote so far."""
    with psycopg.connect(primary.url(), autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    lsn = str(row[0])

    def caught_up() -> bool:
        with psycopg.connect(standby.url(), autocommit=True) as conn:
            done = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [lsn]).fetchone()
        return bool(done and done[0])

    support.wait_until(caught_up, timeout=60, what="the standby to replay the primary's WAL")


def rows(spark: SparkSession, lake: DeltaCatalog, table: str, snapshot: int) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(row) for row in lake.read_at(spark, table, snapshot).collect())


def server_errors(base: str) -> dict[str, float]:
    """5xx answers other than 503/504 this server process gave (its /metrics)."""
    with httpx.Client(base_url=base, timeout=10) as api:
        samples = support.scrape_once(api)
    return {
        f"{s.labels['method']} {s.labels['route']} → {s.labels['status']}": s.value
        for s in samples.get("metaservice_http_requests_total", [])
        if s.labels["status"].startswith("5") and s.labels["status"] not in ("503", "504") and s.value
    }


@pytest.mark.spark
def test_a_failover_that_loses_the_tail_gives_no_barrier_two_meanings_and_no_row_twice(
    cluster: Cluster, spark: SparkSession, tmp_path: Path
) -> None:
    old, new = cluster.primary, cluster.standby
    url = old.url("metaservice")
    support.truncate(url)
    with psycopg.connect(url, autocommit=True) as conn:  # an old primary whose clock ran a day ahead
        conn.execute(
            "UPDATE barrier_clock SET last_barrier = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + %s",
            [DAY_AHEAD_US],
        )
    balancer = Balancer(old.port).start()
    route_replication_through(balancer, new)
    multi_host = (
        f"postgresql://postgres@127.0.0.1:{old.port},127.0.0.1:{new.port}/metaservice?target_session_attrs=read-write"
    )
    log = tmp_path / "servers.log"
    servers = [support.ServerProcess(multi_host, env=SERVER_ENV, log_path=log) for _ in range(2)]
    told = Told()
    lake = DeltaCatalog(tmp_path / "lake")
    first, second = (RecordingClient(s.base_url, told) for s in servers)
    try:
        for server in servers:
            server.start()
        a, b = servers[0].base_url, servers[1].base_url
        cleaner = EtlJob(spark, first, lake, job_id="clean", sources=[ROOT], sinks=[CLEAN], start="earliest")
        keyer = EtlJob(spark, second, lake, job_id="per_key", sources=[CLEAN], sinks=[PER_KEY], start="earliest")

        # Replicated: batch 1 through both jobs.
        ingest(spark, lake, 1)
        cleaner.register()
        keyer.register()
        assert cleaner.run_once(clean, mode=Append()).action == "process"
        assert keyer.run_once(per_key, mode=Overwrite()).action == "process"
        told.read(a)
        told.read(b)
        replayed_everything(old, new)

        # Frozen: nothing written from here on reaches the standby.
        balancer.vanish()
        ingest(spark, lake, 2)
        lost = cleaner.run_once(clean, mode=Append())
        assert lost.action == "process", lost
        assert keyer.run_once(per_key, mode=Overwrite()).action == "process"
        told.issue(b)
        told.read(a)
        told.read(b)
        ingest(spark, lake, 3)
        first.before_commit = cluster.failover_kill_and_promote  # the commit reaches the new primary only
        refused = cleaner.run_once(clean, mode=Append())
        assert first.before_commit is None, "the failover happened"
        before = max(told.handed)

        # After: new data, both jobs, barriers and reads through both servers.
        ingest(spark, lake, 4)
        after = cleaner.run_once(clean, mode=Append())
        keyed = keyer.run_once(per_key, mode=Overwrite())
        issued = [told.issue(a), told.issue(b)]
        final = [told.read(a), told.read(b)]
        errors = {base: server_errors(base) for base in (a, b)}
    finally:
        first.close()
        second.close()
        for server in servers:
            server.stop()
        balancer.close()

    assert not told.conflicts, "barriers with two meanings:\n" + "\n".join(told.conflicts)
    assert after.barrier is not None and keyed.barrier is not None
    for barrier in (after.barrier, keyed.barrier, *issued, *final):
        assert barrier > before, f"barrier {barrier} issued after the failover is not above {before}"
    assert not any(errors.values()), errors
    assert not [s for s in told.statuses if s >= 500], told.statuses
    # The commit's barrier was unknown to the new primary: the job undid what it wrote for it. Its next barrier
    # found its commits for the lost barriers (and that undo) after its older baseline and undid them; so did the
    # job downstream.
    assert refused.action == "aborted" and refused.undone == (CLEAN,), refused
    assert refused.barrier is not None and lost.barrier is not None and refused.barrier > lost.barrier
    assert "not in flight" in (refused.reason or ""), refused.reason
    assert after.action == "process" and after.undone == (CLEAN,) and not after.reused, after
    assert keyed.action == "process" and keyed.undone == (PER_KEY,) and not keyed.reused, keyed

    # The sinks as the last strong read answered them, against a recomputation from the root.
    clean_now, keyed_now = (told.meaning[(final[-1], table)][0] for table in (CLEAN, PER_KEY))
    root = lake.latest_snapshot(ROOT)
    assert root is not None and clean_now is not None and keyed_now is not None
    expected = Counter(r for r in rows(spark, lake, ROOT, root).elements() if r[2] > 0)
    actual = rows(spark, lake, CLEAN, clean_now)
    duplicated, missing = actual - expected, expected - actual
    assert not duplicated and not missing, f"{CLEAN}: duplicated {dict(duplicated)}, missing {dict(missing)}"
    per: dict[str, tuple[int, float]] = {}
    for _, key, amount in expected.elements():
        events, total = per.get(key, (0, 0.0))
        per[key] = (events + 1, total + amount)
    assert rows(spark, lake, PER_KEY, keyed_now) == Counter((k, n, s) for k, (n, s) in per.items())
