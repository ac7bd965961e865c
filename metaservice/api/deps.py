"""Typed dependencies shared by the routers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.schemas import JOB_PATTERN, NAME_PART_PATTERN
from metaservice.settings import Settings


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    """One session per request. It never commits: services commit before the route returns."""
    async with request.state.sessions() as session:
        yield session


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SessionDep = Annotated[AsyncSession, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]

JobIdPath = Annotated[str, Path(pattern=JOB_PATTERN, max_length=200, description="ETL job id")]
CatalogPath = Annotated[str, Path(pattern=NAME_PART_PATTERN, max_length=128)]
DatabasePath = Annotated[str, Path(pattern=NAME_PART_PATTERN, max_length=128)]
TablePath = Annotated[str, Path(pattern=NAME_PART_PATTERN, max_length=128)]
BarrierPath = Annotated[int, Path(ge=1, le=2**63 - 1, description="barrier value")]
Limit = Annotated[int, Query(ge=1, le=1000, description="page size")]
BeforeBarrier = Annotated[int | None, Query(ge=1, le=2**63 - 1, description="page: only entries before this barrier")]
AfterName = Annotated[
    str | None, Query(max_length=400, pattern=r"^[^\x00]*$", description="page: only names after this one")
]


def table_name(catalog: str, database: str, table: str) -> str:
    return f"{catalog}.{database}.{table}"
