"""The moment a lineage question is asked about: a barrier number or an ISO-8601 time with a time zone.

Parsed before any database work (a bad value is a 422 that changed nothing), resolved inside the read's
transaction: a barrier must have been issued (404 otherwise) and stands for the lineage in effect at it (rule 1);
a time stands for the edges that existed then, and for node states as of the newest barrier issued by then.
"""

from __future__ import annotations

import re
from datetime import datetime

from metaservice.db.database import Connection
from metaservice.errors import InvalidRequest, NotFound
from metaservice.repositories import history
from metaservice.repositories.lineage import AsOf

AsOfSpec = int | datetime
"""A barrier number, or an aware time."""

MAX_BARRIER = 2**63 - 1


BARRIER_PATTERN = r"^[0-9]+$"
# RFC 3339 date-time (what OpenAPI's `format: date-time` means): seconds required, a `Z` or an offset required.
TIME_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?$")
AS_OF_SCHEMA = {"anyOf": [{"type": "string", "pattern": BARRIER_PATTERN}, {"type": "string", "format": "date-time"}]}
"""How an `as_of`-like parameter is documented: exactly the values `parse_as_of` accepts."""


def parse_as_of(value: str, *, name: str = "as_of") -> AsOfSpec:
    """A non-negative barrier number (ASCII digits; beyond int64 it is a barrier never issued) or an RFC 3339
    time with a time zone; 422 otherwise."""
    if value.isascii() and value.isdigit():
        return min(int(value), MAX_BARRIER + 1)
    match = TIME_PATTERN.match(value)
    if match is None:
        raise InvalidRequest(
            f"{name} must be a barrier number or an ISO-8601 time with a time zone, not {value!r}",
            parameter=name,
            value=value,
        )
    if match.group(2) is None:
        raise InvalidRequest(
            f"{name}: the time {value!r} has no time zone (add 'Z' or an offset such as '+00:00')",
            parameter=name,
            value=value,
        )
    try:
        return datetime.fromisoformat(value.upper())
    except ValueError:
        raise InvalidRequest(f"{name}: {value!r} is not a valid time", parameter=name, value=value) from None


async def resolve_as_of(s: Connection, spec: AsOfSpec) -> AsOf:
    """The barrier and time `spec` stands for; 404 `not_found` for a barrier never issued."""
    if isinstance(spec, int):
        issued_at = None if spec > MAX_BARRIER else await history.barrier_issued_at(s, barrier=spec)
        if issued_at is None:
            raise NotFound(f"barrier {spec} was never issued", barrier=spec)
        return AsOf(barrier=spec, time=issued_at, by_time=False)
    return AsOf(barrier=await history.barrier_at(s, time=spec), time=spec, by_time=True)
