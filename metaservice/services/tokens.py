"""API tokens: creation (the secret is shown once), listing, revocation, and authentication of requests."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import ApiToken
from metaservice.db.transaction import in_transaction
from metaservice.errors import InvalidRequest, NotFound, TableMetadataConflict
from metaservice.repositories import tokens as token_rows

Role = Literal["admin", "job", "reader"]
TOKEN_PREFIX = "ms_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's name, role and (for jobs) the job ids it may act for."""

    name: str
    role: Role
    job_patterns: tuple[str, ...] = ()

    def may_act_for(self, job_id: str) -> bool:
        return self.role == "admin" or (self.role == "job" and any(fnmatchcase(job_id, p) for p in self.job_patterns))


ANONYMOUS_ADMIN = Principal(name="anonymous", role="admin")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def authenticate(session: AsyncSession, *, token: str) -> Principal | None:
    """The principal of a presented bearer token, or None when it is unknown or revoked."""

    async def work(s: AsyncSession) -> Principal | None:
        row = await token_rows.find_active(s, token_sha256=digest(token))
        if row is None:
            return None
        return Principal(name=row.name, role=row.role, job_patterns=tuple(row.job_patterns))  # type: ignore[arg-type]

    return await in_transaction(session, work, read_only=True)


async def create_token(
    session: AsyncSession, *, name: str, role: Role, job_patterns: Sequence[str]
) -> tuple[str, ApiToken]:
    """Create a token; returns the secret (shown once, only its hash is stored) and the stored row."""
    if role == "job" and not job_patterns:
        raise InvalidRequest("a job token needs at least one --job pattern (e.g. 'enrich' or 'team-a.*')")
    if role != "job" and job_patterns:
        raise InvalidRequest("job patterns apply to job tokens only")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)

    async def work(s: AsyncSession) -> ApiToken:
        if any(t.name == name for t in await token_rows.list_all(s)):
            raise TableMetadataConflict(f"a token named {name!r} exists already", name=name)
        return await token_rows.insert(s, name=name, token_sha256=digest(secret), role=role, job_patterns=job_patterns)

    return secret, await in_transaction(session, work)


async def list_tokens(session: AsyncSession) -> list[ApiToken]:
    return await in_transaction(session, token_rows.list_all, read_only=True)


async def revoke_token(session: AsyncSession, *, name: str) -> None:
    async def work(s: AsyncSession) -> None:
        if not await token_rows.revoke(s, name=name):
            raise NotFound(f"no active token named {name!r}", name=name)

    await in_transaction(session, work)
