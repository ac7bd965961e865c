"""SQL for API tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from metaservice.db.database import Connection
from metaservice.repositories.driver import fetch_all, fetch_as, fetch_one_as

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


# Every request of a server with auth on looks its token up: the lookups of concurrent requests share a statement
# (db/coalescer.py), each digest answered by its position.
_FIND_ACTIVE_MANY = f"""
    SELECT q.ord, {", ".join(f"t.{c.strip()}" for c in _COLUMNS.split(","))}
      FROM unnest(CAST(%(digests)s AS text[])) WITH ORDINALITY AS q(digest, ord)
      JOIN api_tokens t ON t.token_sha256 = q.digest AND t.revoked_at IS NULL
"""
_GET = f"SELECT {_COLUMNS} FROM api_tokens WHERE name = %(name)s"
_INSERT = f"""
    INSERT INTO api_tokens (name, token_sha256, role, job_patterns, table_patterns)
    VALUES (%(name)s, %(digest)s, %(role)s, %(jobs)s, %(tables)s)
    ON CONFLICT (name) DO NOTHING
    RETURNING {_COLUMNS}
"""
_LIST = f"SELECT {_COLUMNS} FROM api_tokens ORDER BY name"
_REVOKE = f"UPDATE api_tokens SET revoked_at = now() WHERE name = %(name)s AND revoked_at IS NULL RETURNING {_COLUMNS}"


async def find_active_many(conn: Connection, digests: Sequence[str]) -> list[TokenRow | None]:
    """The active tokens with these digests, in their order (None: unknown or revoked), in one statement."""
    found: list[TokenRow | None] = [None] * len(digests)
    for row in await fetch_all(conn, _FIND_ACTIVE_MANY, {"digests": list(digests)}, prepare=True):
        found[row[0] - 1] = TokenRow(*row[1:])
    return found


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
