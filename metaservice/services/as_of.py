"""The moment a lineage question is asked about: a barrier number or an ISO-8601 time with a time zone.

Parsed before any database work (a bad value is a 422 that changed nothing), resolved inside the read's
transaction: a barrier must have been issued (404 otherwise) and stands for the lineage in effect at it (rule 1);
a time stands for the edges that existed then, and for node states as of the newest barrier issued by then.
"""

from __future__ import annotations

from datetime import datetime

from metaservice.db.database import Connection
from metaservice.errors import InvalidRequest, NotFound
from metaservice.repositories import history
from metaservice.repositories.lineage import AsOf

AsOfSpec = int | datetime
"""A barrier number, or an aware time."""

MAX_BARRIER = 2**63 - 1


def parse_as_of(value: str, *, name: str = "as_of") -> AsOfSpec:
    """A non-negative barrier number (ASCII digits) or an ISO-8601 time with a time zone; 422 otherwise."""
    text = value.strip()
    if text.isascii() and text.isdigit():
        barrier = int(text)
        if barrier > MAX_BARRIER:
            raise InvalidRequest(f"{name}: barrier {text} is out of range", parameter=name, value=value)
        return barrier
    try:
        time = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(
            f"{name} must be a barrier number or an ISO-8601 time with a time zone, not {value!r}",
            parameter=name,
            value=value,
        ) from None
    if time.tzinfo is None or time.utcoffset() is None:
        raise InvalidRequest(
            f"{name}: the time {value!r} has no time zone (add 'Z' or an offset such as '+00:00')",
            parameter=name,
            value=value,
        )
    return time


async def resolve_as_of(s: Connection, spec: AsOfSpec) -> AsOf:
    """The barrier and time `spec` stands for; 404 `not_found` for a barrier never issued."""
    if isinstance(spec, int):
        issued_at = await history.barrier_issued_at(s, barrier=spec)
        if issued_at is None:
            raise NotFound(f"barrier {spec} was never issued", barrier=spec)
        return AsOf(barrier=spec, time=issued_at, by_time=False)
    return AsOf(barrier=await history.barrier_at(s, time=spec), time=spec, by_time=True)
