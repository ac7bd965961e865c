"""Test support: a PostgreSQL to test against and real `metaservice serve` processes."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

from metaservice.db import embedded
from metaservice.process import ServerProcess, free_port, wait_until

__all__ = [
    "ServerProcess",
    "admin_url",
    "free_port",
    "fresh_database",
    "truncate",
    "wait_until",
    "with_database",
]

REPO = Path(__file__).resolve().parents[1]
TEST_PG_DIR = REPO / ".test-pg"
TRUNCATE = (
    "TRUNCATE rollbacks, lease_snapshots, leases, job_runs, snapshot_ranges, lineage_edges, jobs, tables, barriers"
    " RESTART IDENTITY CASCADE;"
    " UPDATE barrier_clock SET last_barrier = 0"
)


def admin_url() -> str:
    """A URL to the `postgres` database of the server the tests use (embedded unless configured)."""
    configured = os.environ.get("METASERVICE_TEST_DATABASE_URL")
    if configured:
        return configured
    server = embedded.start(TEST_PG_DIR, stop_on_exit=False)
    return embedded.url_of(server)


def with_database(url: str, database: str) -> str:
    """`url` pointing at another database on the same server."""
    parsed = httpx.URL(url.replace("postgresql+psycopg://", "postgresql://"))
    return str(parsed.copy_with(path=f"/{database}"))


def fresh_database(admin: str, name: str) -> str:
    """Drop and create database `name`; return its URL."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(admin, name)


def truncate(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TRUNCATE)
