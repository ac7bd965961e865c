"""SQL for API tokens."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import ApiToken


async def find_active(session: AsyncSession, *, token_sha256: str) -> ApiToken | None:
    return await session.scalar(
        select(ApiToken).where(ApiToken.token_sha256 == token_sha256, ApiToken.revoked_at.is_(None))
    )


async def insert(
    session: AsyncSession, *, name: str, token_sha256: str, role: str, job_patterns: Sequence[str]
) -> ApiToken:
    token = ApiToken(name=name, token_sha256=token_sha256, role=role, job_patterns=list(job_patterns))
    session.add(token)
    await session.flush()
    await session.refresh(token)
    return token


async def list_all(session: AsyncSession) -> list[ApiToken]:
    return list(await session.scalars(select(ApiToken).order_by(ApiToken.name)))


async def revoke(session: AsyncSession, *, name: str) -> bool:
    result = await session.execute(
        update(ApiToken)
        .where(ApiToken.name == name, ApiToken.revoked_at.is_(None))
        .values(revoked_at=func.now())
        .returning(ApiToken.id)
    )
    return result.first() is not None
