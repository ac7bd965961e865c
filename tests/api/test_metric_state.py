"""The /metrics refresh reads only what changed (services/metric_state.py), and its figures equal a full read's.

Changes are made through the real server over HTTP; the refresh under test runs here, on its own connection, in
one REPEATABLE READ transaction together with the whole-catalog read it must equal (`delays.metric_figures_in`):
the same snapshot and the same `now()`, so every figure, delays and lags included, must be equal exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx
import psycopg
import pytest

from metaservice.services.delays import MetricFigures, metric_figures_in
from metaservice.services.metric_state import MetricState
from tests import support
from tests.support import table_path
from tests.support.pipelines import CHAIN, MART_B, RAW_A, Driver

MART_E = "lake.mart.e"

# The tables that grow with the catalog (barriers grow with time, one index probe here; the two seeded ones are
# scanned whole, as any table of two rows is).
CATALOG = frozenset({"tables", "jobs", "lineage_edges", "snapshot_ranges", "job_runs"})
# The server's connections plan every statement generically (db/database.py): so does the refresh under test.
GENERIC = "-c plan_cache_mode=force_generic_plan"
# What a refresh with nothing changed may read: the probe (one row), no change, no barrier.
IDLE_ROWS = 1


class Refresher:
    """A `MetricState` refreshed on demand, each refresh checked against a full read of the same snapshot."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.state = MetricState(full_every=10**9)  # never read in full for its own sake: every read is checked

    async def _read(self) -> tuple[MetricFigures, MetricFigures, dict[str, int]]:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True, options=GENERIC) as conn:
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            incremental = await self.state.refresh(conn)
            scanned = await self._scanned(conn)
            full = await metric_figures_in(conn)
            await conn.execute("COMMIT")
        return incremental, full, scanned

    @staticmethod
    async def _scanned(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> dict[str, int]:
        """Rows the transaction read so far from each catalog table (sequential scans plus the heap fetches of index
        scans; index-only scans fetch none)."""
        cursor = await conn.execute(
            "SELECT relname, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
        )
        counted = {str(name): int(str(rows)) for name, rows in await cursor.fetchall()}
        return {name: rows for name, rows in counted.items() if rows and name in CATALOG}

    def check(self, *, full: bool | None = False) -> dict[str, int]:
        """Refresh; assert the figures equal a full read's and whether the refresh read in full (None: either). The
        rows the refresh's statements read, per table."""
        incremental, whole, scanned = anyio.run(self._read)
        assert incremental == whole
        if full is not None:
            assert (self.state.full_reason is not None) == full, self.state.full_reason
        return scanned


@pytest.fixture(name="refresher")
def fx_refresher(database_url: str) -> Refresher:
    return Refresher(database_url)


@pytest.fixture(name="chain")
def fx_chain(api: httpx.Client) -> Driver:
    return Driver(api, CHAIN)


def test_incremental_refreshes_equal_full_reads_through_changes_of_every_kind(
    chain: Driver, refresher: Refresher
) -> None:
    api = chain.api
    refresher.check(full=True)  # the first read is a full one
    refresher.check()

    chain.run("j1", {RAW_A: 1})  # a root report, a seal, a new barrier, a commit
    refresher.check()
    chain.run("j2")
    chain.run("j3")
    refresher.check()
    assert refresher.state.rows_read > IDLE_ROWS

    b2 = int(api.post("/barriers").json()["barrier"])  # a barrier alone: the root holds on, the marts lag
    refresher.check()
    assert api.post(f"/tables/{table_path(RAW_A)}/snapshots", json={"snapshot_id": 2}).status_code == 200
    refresher.check()  # a report no barrier sealed yet
    b3 = int(api.post("/barriers").json()["barrier"])  # seals it: the marts lack new data now
    refresher.check()

    assert chain.next("j1")["barrier"] in (b2, b3)
    refresher.check()  # in flight
    chain.commit("j1", chain.next("j1")["barrier"])
    refresher.check()
    aborted = chain.next("j2")
    assert aborted["action"] == "process"
    response = api.post(f"/jobs/j2/barriers/{aborted['barrier']}/abort", json={"reason": "test"})
    assert response.status_code == 200, response.text
    refresher.check()  # an abort
    chain.next("j3")  # skips the aborted barrier
    refresher.check()
    chain.run("j1", {RAW_A: 3})
    chain.next("j1")  # idle: nothing new
    refresher.check()

    driver4 = Driver(api, {"j4": ([MART_B], [MART_E])})  # a new job and a new table
    refresher.check()
    driver4.run("j4")
    refresher.check()
    assert api.post("/unregister/j4").status_code == 200  # the job goes, its table is an orphan root
    refresher.check()
    assert api.post(f"/tables/{table_path(MART_E)}/retire").status_code == 200
    refresher.check()  # a retired table leaves the figures
    assert api.post(f"/tables/{table_path(MART_E)}/revive").status_code == 200
    refresher.check(full=None)  # revived (read in full if its barrier is older than the history kept)
    driver4 = Driver(api, {"j4": ([MART_B], [MART_E])})  # registered again
    refresher.check()
    chain.run("j1", {RAW_A: 4})
    kept = drain(driver4, "j4")
    chain.run("j1", {RAW_A: 5})
    drain(driver4, "j4")
    refresher.check()

    planned = api.post("/rollbacks", json={"table": MART_E, "barrier": kept})
    assert planned.status_code == 201, planned.text
    refresher.check()  # planned only: nothing moved
    completed = api.post(f"/rollbacks/{planned.json()['rollback_id']}/complete")
    assert completed.status_code == 200, completed.text
    refresher.check(full=None)  # ranges and runs deleted (read in full when past the history kept)
    chain.run("j1", {RAW_A: 6})
    drain(driver4, "j4")
    refresher.check()
    refresher.check()
    assert refresher.state.rows_read == IDLE_ROWS


def test_a_refresh_reads_only_what_changed_in_a_large_catalog(
    api: httpx.Client, database_url: str, refresher: Refresher
) -> None:
    """4,000 pipelines (8,000 tables, 4,000 jobs) seeded straight into the tables; then nothing changes, then one
    pipeline runs. The refresh's own statements return and read rows in proportion to the change.

    A transaction that started before the seed stays open throughout (another client's, in any database of the
    cluster): it holds every snapshot's xmin back, and a refresh bounded below by xmin read every row written since
    (32,000 here, seen when other tests ran beside it)."""
    with psycopg.connect(database_url, autocommit=True) as elsewhere, elsewhere.transaction():
        elsewhere.execute("SELECT pg_current_xact_id()")  # an id of its own, in progress from here on
        seed(database_url, pipelines=4000)
        scanned = refresher.check(full=True)
        print("full read:", refresher.state.rows_read, "rows returned,", scanned)
        assert sum(scanned.values()) >= 8000  # the full read reads every table

        scanned = refresher.check()
        assert refresher.state.rows_read == IDLE_ROWS
        assert refresher.state.statements == 2  # the probe, the changes (no new barrier)
        assert sum(scanned.values()) <= 5, scanned

    chain = Driver(api, CHAIN)
    chain.run("j1", {RAW_A: 1})  # one pipeline: a new barrier, a seal, a commit (and 3 jobs, 4 tables registered)
    scanned = refresher.check()
    print("one pipeline registered and run:", refresher.state.rows_read, "rows returned,", scanned)
    assert refresher.state.rows_read <= 40, refresher.state.rows_read
    assert sum(scanned.values()) <= 40, scanned
    refresher.check()
    assert refresher.state.rows_read == IDLE_ROWS  # and nothing since

    chain.run("j2")  # one job commits: one table and one job change
    scanned = refresher.check()
    print("one commit:", refresher.state.rows_read, "rows returned,", scanned)
    assert refresher.state.rows_read <= 10, refresher.state.rows_read
    assert sum(scanned.values()) <= 20, scanned


def drain(driver: Driver, job: str) -> int:
    """Let `job` process every barrier it is offered; the last one."""
    last = None
    while (decision := driver.next(job))["action"] == "process":
        driver.commit(job, decision["barrier"])
        last = int(decision["barrier"])
    assert last is not None, decision
    return last


def seed(url: str, *, pipelines: int) -> None:
    """`pipelines` root → job → table pipelines, each job committed at the first of two barriers (so the tables
    lag one barrier behind), written with set-based INSERTs like bench/seed.py."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute(
            "INSERT INTO barriers (barrier, issued_at, issued_by) VALUES"
            " (1000, now() - interval '2 minutes', 'seed'), (2000, now() - interval '1 minute', 'seed')"
        )
        conn.execute("UPDATE barrier_clock SET last_barrier = 2000")
        conn.execute(
            "INSERT INTO tables (name, format, latest_snapshot_id, seal_candidate)"
            " SELECT 'seed.raw.r' || i, 'delta', 1, false FROM generate_series(1, %(n)s) i"
            " UNION ALL SELECT 'seed.mart.m' || i, 'delta', 1, false FROM generate_series(1, %(n)s) i",
            {"n": pipelines},
        )
        conn.execute(
            "INSERT INTO jobs (name, last_barrier) SELECT 'seed.j' || i, 1000 FROM generate_series(1, %(n)s) i",
            {"n": pipelines},
        )
        conn.execute(
            """
            INSERT INTO lineage_edges (job_id, table_id, role, added_after)
            SELECT j.id, t.id, CASE WHEN t.name LIKE 'seed.raw.%%' THEN 'source' ELSE 'sink' END, 0
              FROM jobs j JOIN tables t
                ON t.name IN ('seed.raw.r' || substr(j.name, 7), 'seed.mart.m' || substr(j.name, 7))
             WHERE j.name LIKE 'seed.j%%'
            """
        )
        conn.execute(
            """
            INSERT INTO snapshot_ranges (table_id, first_barrier, last_barrier, snapshot_id, kind, job_id)
            SELECT t.id, 1000, NULL, 1, 'sealed', NULL FROM tables t WHERE t.name LIKE 'seed.raw.%%'
            UNION ALL
            SELECT e.table_id, 1000, 1000, 1, 'committed', e.job_id FROM lineage_edges e WHERE e.role = 'sink'
            """
        )
        conn.execute(
            """
            INSERT INTO job_runs (job_id, first_barrier, barrier, status, inputs_ready_at, started_at, finished_at)
            SELECT j.id, 1000, 1000, 'committed', now() - interval '2 minutes', now() - interval '110 seconds',
                   now() - interval '100 seconds'
              FROM jobs j
            """
        )
        conn.execute("ANALYZE")


@pytest.fixture(autouse=True)
def _empty_afterwards(database_url: str) -> Iterator[None]:
    yield
    support.truncate(database_url)
