"""Bearer tokens made by the real command line, and servers that require them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from metaservice.db import migrate
from tests.support.database import fresh_database
from tests.support.process import ServerProcess


@dataclass(frozen=True)
class Token:
    """A token to create: its name, its role, and for a job token the jobs and tables it may act for."""

    name: str
    role: str
    jobs: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()


def create_token(url: str, name: str, role: str, *jobs: str, tables: tuple[str, ...] = ()) -> str:
    """`metaservice token create` on the database at `url`; the secret it prints."""
    command = [sys.executable, "-m", "metaservice", "token", "create", name, "--role", role, "--database-url", url]
    for job in jobs:
        command += ["--job", job]
    for pattern in tables:
        command += ["--tables", pattern]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.strip()


def revoke_token(url: str, name: str) -> None:
    """`metaservice token revoke` on the database at `url`."""
    command = [sys.executable, "-m", "metaservice", "token", "revoke", name, "--database-url", url]
    subprocess.run(command, check=True, timeout=60)


@contextmanager
def secured_server(
    admin_url: str,
    database: str,
    tokens: Mapping[str, Token],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    revoked: Iterable[str] = (),
) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """A server requiring bearer tokens on a fresh, migrated database `database`, and the secrets of `tokens` (by
    their keys) created there; the tokens named by the keys in `revoked` are revoked before it starts."""
    url = fresh_database(admin_url, database)
    migrate.upgrade(url)
    secrets = {key: create_token(url, t.name, t.role, *t.jobs, tables=t.tables) for key, t in tokens.items()}
    for key in revoked:
        revoke_token(url, tokens[key].name)
    server = ServerProcess(url, env={"METASERVICE_AUTH_ENABLED": "true", **(env or {})}, log_path=log_path).start()
    try:
        yield server, secrets
    finally:
        server.stop()
