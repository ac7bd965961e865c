"""Typed dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BeforeValidator

from metaservice.db.database import Database
from metaservice.openlineage.runs import ParentRun
from metaservice.runtime import Runtime
from metaservice.schemas import JOB_PATTERN, NAME_PART_PATTERN
from metaservice.settings import Settings


async def get_database(request: Request) -> Database:
    """The process's database (the connection pool), opened in the lifespan. Services draw their own transaction
    boundaries; nothing is committed after the route returns. (Every dependency is `async def`: FastAPI runs a
    plain `def` one in the thread pool, a thread hop that cost ~0.1 ms of CPU per request.)"""
    database: Database = request.state.database
    return database


async def get_runtime(request: Request) -> Runtime:
    """The process's protocol machinery (allocator, coalesced gathers and writes, freshness listener), built over
    the database in the lifespan: what the barrier protocol, consistent reads and delays run on."""
    runtime: Runtime = request.state.runtime
    return runtime


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


DatabaseDep = Annotated[Database, Depends(get_database)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SettingsDep = Annotated[Settings, Depends(get_settings)]

JobIdPath = Annotated[str, Path(pattern=JOB_PATTERN, max_length=200, description="ETL job id")]
CatalogPath = Annotated[str, Path(pattern=NAME_PART_PATTERN, max_length=128)]
DatabasePath = Annotated[str, Path(pattern=NAME_PART_PATTERN, max_length=128)]
TablePath = Annotated[str, Path(pattern=NAME_PART_PATTERN, max_length=128)]


def plain_digits(value: object) -> object:
    """Path ids are ASCII digits only: int() would also read `1_000`, `+5`, ` 5` and other scripts' digits."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("must be a plain decimal number (digits 0-9 only)")
    return value


# The validator after Path(): in front of it, FastAPI publishes the bounds as `ge`/`le` instead of minimum/maximum.
BarrierPath = Annotated[
    int, Path(ge=1, le=2**63 - 1, description="barrier value (digits only)"), BeforeValidator(plain_digits)
]
Limit = Annotated[int, Query(ge=1, le=1000, description="page size")]
BeforeBarrier = Annotated[int | None, Query(ge=1, le=2**63 - 1, description="page: only entries before this barrier")]
AfterName = Annotated[
    str | None, Query(max_length=400, pattern=r"^[^\x00]*$", description="page: only names after this one")
]


def table_name(catalog: str, database: str, table: str) -> str:
    return f"{catalog}.{database}.{table}"


OPENLINEAGE_PARENT = "X-OpenLineage-Parent"
PARENT_MAX_LENGTH = 1000


def _parent_header_schema(schema: dict[str, Any]) -> None:
    """Published as a string of `ParentRun.PATTERN` (which `ParentRun.parse` checks, with its own message); no `null`
    branch: an absent header is no parent, and the text "null" is no valid value."""
    schema.pop("anyOf", None)
    schema.update(type="string", maxLength=PARENT_MAX_LENGTH, pattern=ParentRun.PATTERN)


async def openlineage_parent(
    value: Annotated[
        str | None,
        Header(
            alias=OPENLINEAGE_PARENT,
            max_length=PARENT_MAX_LENGTH,
            json_schema_extra=_parent_header_schema,
            description="The OpenLineage run that started this run of the job, as "
            f"`{ParentRun.FORMAT}` (Airflow's `lineage_parent_id`, `OPENLINEAGE_PARENT_ID`): the OpenLineage "
            "event of a run the call ends carries it as its `parent` facet. Malformed: 422, nothing changed.",
        ),
    ] = None,
) -> ParentRun | None:
    """The `X-OpenLineage-Parent` header, read before the route runs: malformed, it is a 422 naming the header."""
    if value is None:
        return None
    try:
        return ParentRun.parse(value)
    except ValueError as exc:
        error = {"type": "value_error", "loc": ("header", OPENLINEAGE_PARENT), "msg": str(exc), "input": value}
        raise RequestValidationError([error]) from None


OpenLineageParentDep = Annotated[ParentRun | None, Depends(openlineage_parent)]
