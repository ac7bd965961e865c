"""SQL for API tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from metaservice.db.database import Connection
from metaservice.repositories.driver import fetch_as, fetch_one_as

_COLUMNS = "id, name, token_sha256, role, job_patterns, table_patterns, created_at, revoked_at"


@dataclass(slots=True)
class TokenRow:
    id: int
    name: str
    token_sha256: str
    role: str
    job_patterns: list[str]
    table_patterns: list[str]
    created_at: datetime
    revoked_at: datetime | None


_FIND_ACTIVE = f"SELECT {_COLUMNS} FROM api_tokens WHERE token_sha256 = %(digest)s AND revoked_at IS NULL"
_GET = f"SELECT {_COLUMNS} FROM api_tokens WHERE name = %(name)s"
_INSERT = f"""
    INSERT INTO api_tokens (name, token_sha256, role, job_patterns, table_patterns)
    VALUES (%(name)s, %(digest)s, %(role)s, %(jobs)s, %(tables)s)
    ON CONFLICT (name) DO NOTHING
    RETURNING {_COLUMNS}
"""
_LIST = f"SELECT {_COLUMNS} FROM api_tokens ORDER BY name"
_REVOKE = f"UPDATE api_tokens SET revoked_at = now() WHERE name = %(name)s AND revoked_at IS NULL RETURNING {_COLUMNS}"


async def find_active(conn: Connection, *, token_sha256: str) -> TokenRow | None:
    return await fetch_one_as(conn, TokenRow, _FIND_ACTIVE, {"digest": token_sha256})


async def get(conn: Connection, *, name: str) -> TokenRow | None:
    return await fetch_one_as(conn, TokenRow, _GET, {"name": name})


async def insert(
    conn: Connection,
    *,
    name: str,
    token_sha256: str,
    role: str,
    job_patterns: Sequence[str],
    table_patterns: Sequence[str],
) -> TokenRow | None:
    """The new token, or None when the name is taken (by a live or a revoked token)."""
    params = {"name": name, "digest": token_sha256, "role": role, "jobs": list(job_patterns)}
    return await fetch_one_as(conn, TokenRow, _INSERT, {**params, "tables": list(table_patterns)})


async def list_all(conn: Connection) -> list[TokenRow]:
    return await fetch_as(conn, TokenRow, _LIST)


async def revoke(conn: Connection, *, name: str) -> TokenRow | None:
    return await fetch_one_as(conn, TokenRow, _REVOKE, {"name": name})
