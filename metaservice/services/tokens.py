"""API tokens: creation (the secret is shown once), listing, revocation, and authentication of requests."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Literal, cast

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_autocommit, in_transaction
from metaservice.errors import InvalidRequest, NameTaken, NotFound
from metaservice.repositories import tokens as token_rows
from metaservice.repositories.tokens import TokenRow

if TYPE_CHECKING:
    from metaservice.runtime import Runtime

Role = Literal["admin", "job", "reader"]
TOKEN_PREFIX = "ms_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's name, role and, for jobs, the job ids it may act for and the table namespaces
    (globs on catalog.database.table) it may write."""

    name: str
    role: Role
    job_patterns: tuple[str, ...] = ()
    table_patterns: tuple[str, ...] = ()

    def may_act_for(self, job_id: str) -> bool:
        return self.role == "admin" or (self.role == "job" and any(fnmatchcase(job_id, p) for p in self.job_patterns))

    def may_write_table(self, table: str) -> bool:
        folded = table.lower()
        return self.role == "admin" or (
            self.role == "job" and any(fnmatchcase(folded, p.lower()) for p in self.table_patterns)
        )


ANONYMOUS_ADMIN = Principal(name="anonymous", role="admin")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _principal(row: TokenRow) -> Principal:
    return Principal(
        name=row.name,
        role=cast(Role, row.role),
        job_patterns=tuple(row.job_patterns),
        table_patterns=tuple(row.table_patterns),
    )


async def authenticate(rt: Runtime, *, token: str) -> Principal | None:
    """The principal of a presented bearer token, or None when it is unknown or revoked. The lookup shares one
    statement with those of concurrent requests; a statement started after the request came in, so a token
    revoked before that is refused."""
    row = await in_autocommit(rt.database, lambda _unit: rt.tokens.submit(digest(token)), connected=False)
    return None if row is None else _principal(row)


def check_patterns(role: str, job_patterns: Sequence[str], table_patterns: Sequence[str]) -> None:
    """A job token names the jobs it acts for and the tables it may write; other roles name none."""
    if role not in ("admin", "job", "reader"):
        raise InvalidRequest(f"role must be admin, job or reader, not {role!r}")
    if role == "job" and not job_patterns:
        raise InvalidRequest("a job token needs at least one --job pattern (e.g. 'enrich' or 'team-a.*')")
    if role != "job" and (job_patterns or table_patterns):
        raise InvalidRequest("--job and --tables patterns apply to job tokens only")
    empty = [p for p in (*job_patterns, *table_patterns) if not p.strip()]
    if empty:
        raise InvalidRequest("an empty pattern matches nothing; give a job id or table name glob")


async def create_token(
    db: Database, *, name: str, role: Role, job_patterns: Sequence[str], table_patterns: Sequence[str] = ()
) -> tuple[str, TokenRow]:
    """Create a token; returns the secret (shown once, only its hash is stored) and the stored row."""
    check_patterns(role, job_patterns, table_patterns)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)

    async def work(conn: Connection) -> TokenRow:
        row = await token_rows.insert(
            conn,
            name=name,
            token_sha256=digest(secret),
            role=role,
            job_patterns=job_patterns,
            table_patterns=table_patterns,
        )
        if row is None:
            existing = await token_rows.get(conn, name=name)
            state = "a revoked token" if existing is not None and existing.revoked_at else "a token"
            raise NameTaken(f"{state} named {name!r} exists already; choose another name", name=name)
        return row

    return secret, await in_transaction(db, work)


async def list_tokens(db: Database) -> list[TokenRow]:
    return await in_autocommit(db, lambda unit: token_rows.list_all(unit.conn))


async def revoke_token(db: Database, *, name: str) -> None:
    async def work(conn: Connection) -> None:
        if await token_rows.revoke(conn, name=name) is None:
            raise NotFound(f"no active token named {name!r}", name=name)

    await in_transaction(db, work)
