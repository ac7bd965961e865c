"""Waiting for a consistent version on an event loop: the server's long poll (`POST /versions` with a freshness
bound and `wait_seconds`), never a sleep loop.

The triggerer runs every trigger on one event loop, so the waiting is asynchronous (`httpx.AsyncClient`); the
answers are read with the client library's own models and errors (`spark_client.models`, `spark_client.errors`),
so a problem document means here what it means to a Spark job.

A server that is down or busy (connection refused or lost, 429, 502, 503, 504) delays the wait: the call is
tried again after a jittered backoff (the only sleep, and only while the server cannot answer), until the
deadline. Other errors (a bad table name, an unknown table, a revoked token) are raised at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from spark_client.errors import MetaServiceError, NoConsistentVersion, NotFreshEnough, Unavailable, error_from_problem
from spark_client.models import ConsistentVersions

log = logging.getLogger("metaservice_airflow")

Consistency = Literal["strong", "weak"]
CONSISTENCIES = ("strong", "weak")
DEFAULT_POLL_SECONDS = 30.0  # the server's default max_wait_seconds
_TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
_BACKOFF_FIRST, _BACKOFF_MAX = 0.2, 5.0


class WaitTimeout(TimeoutError):
    """No version meeting the bound became consistent before the deadline."""


def check_tables(tables: object) -> list[str]:
    """`tables` as a list of `catalog.database.table` names; a clear ValueError otherwise (DAG load time)."""
    if isinstance(tables, str) or not isinstance(tables, Sequence) or not tables:
        raise ValueError(f"tables must be a non-empty list of 'catalog.database.table' names, got {tables!r}")
    names: list[str] = []
    for table in tables:
        parts = table.split(".") if isinstance(table, str) else []
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"tables: each name is 'catalog.database.table', got {table!r}")
        names.append(table)
    if len(set(names)) != len(names):
        raise ValueError(f"tables: a table is named twice in {names!r}")
    return names


def check_bound(
    consistency: object, min_barrier: object, max_staleness_seconds: object
) -> tuple[Consistency, int | None, float | None]:
    """The consistency and the freshness bound, checked (one bound at most); a clear ValueError otherwise."""
    if consistency not in CONSISTENCIES:
        raise ValueError(f"consistency must be 'strong' or 'weak', got {consistency!r}")
    if min_barrier is not None and max_staleness_seconds is not None:
        raise ValueError("give min_barrier or max_staleness_seconds, not both")
    if min_barrier is not None and (
        not isinstance(min_barrier, int) or isinstance(min_barrier, bool) or min_barrier < 0
    ):
        raise ValueError(f"min_barrier must be a barrier (an integer >= 0), got {min_barrier!r}")
    if max_staleness_seconds is not None and (
        not isinstance(max_staleness_seconds, int | float)
        or isinstance(max_staleness_seconds, bool)
        or not max_staleness_seconds > 0
    ):
        raise ValueError(f"max_staleness_seconds must be a number > 0, got {max_staleness_seconds!r}")
    staleness = float(max_staleness_seconds) if max_staleness_seconds is not None else None
    return consistency, min_barrier, staleness  # type: ignore[return-value]  # checked above


def check_seconds(name: str, value: object, *, allow_none: bool = True) -> float | None:
    """A positive number of seconds (or None where allowed); a clear ValueError otherwise."""
    if value is None and allow_none:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Found:
    """A consistent version: its barrier and the snapshot of each table to read there."""

    barrier: int
    snapshots: Mapping[str, int]
    consistency: Consistency

    def as_dict(self) -> dict[str, Any]:
        """What goes to XCom and into an asset event's `extra` (JSON)."""
        return {"barrier": self.barrier, "snapshots": dict(self.snapshots), "consistency": self.consistency}


class AsyncVersions:
    """`POST /versions` on an event loop, with the wire contract of `MetaServiceClient.versions`."""

    def __init__(self, base_url: str, token: str | None, *, timeout: float = 30.0) -> None:
        headers = {"Accept": "application/json, application/problem+json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0))
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def versions(
        self,
        tables: Sequence[str],
        consistency: Consistency,
        *,
        min_barrier: int | None,
        max_staleness_seconds: float | None,
        wait_seconds: float,
    ) -> Found | None:
        """The version meeting the bound, None when there is none yet after the server's wait.

        Raises:
            Unavailable: the server could not answer (down, busy, restarting): worth trying again.
            MetaServiceError: any other error answer (bad request, unknown table, auth).
        """
        body: dict[str, Any] = {"tables": list(tables), "consistency": consistency}
        if min_barrier is not None:
            body["min_barrier"] = min_barrier
        if max_staleness_seconds is not None:
            body["max_staleness_seconds"] = max_staleness_seconds
        if wait_seconds > 0 and (min_barrier is not None or max_staleness_seconds is not None):
            body["wait_seconds"] = round(wait_seconds, 3)
        timeout = httpx.Timeout(self._timeout + wait_seconds, connect=min(self._timeout, 5.0))
        try:
            response = await self._http.post("/versions", json=body, timeout=timeout)
        except httpx.TransportError as exc:
            raise Unavailable(f"POST /versions: {type(exc).__name__}: {exc}", code="connection_failed") from exc
        if response.is_success:
            versions = ConsistentVersions.from_json(response.json())
            return Found(versions.barrier, dict(versions.versions), versions.consistency)
        try:
            problem = response.json()
        except ValueError:
            problem = {"detail": response.text[:500]}
        if not isinstance(problem, dict):
            problem = {"detail": str(problem)[:500]}
        if response.status_code in _TRANSIENT_STATUSES:
            raise Unavailable(str(problem.get("detail") or response.status_code), status=response.status_code)
        error = error_from_problem(response.status_code, problem)
        if isinstance(error, NoConsistentVersion | NotFreshEnough):
            return None
        raise error


async def wait_for_version(
    api: AsyncVersions,
    tables: Sequence[str],
    consistency: Consistency,
    *,
    min_barrier: int | None,
    max_staleness_seconds: float | None,
    deadline: float | None,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
) -> Found:
    """Long-poll until a version of `tables` meets the bound; `deadline` is a `time.monotonic()` value (None:
    wait for ever).

    Without a bound (neither min_barrier nor max_staleness_seconds) any consistent version will do: the server
    is asked with `min_barrier=0`, which waits until one barrier is complete in all of them.

    Raises:
        WaitTimeout: the deadline passed first.
        MetaServiceError: the server refused the request (not a transient failure).
    """
    if min_barrier is None and max_staleness_seconds is None:
        min_barrier = 0
    backoff = _BACKOFF_FIRST
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise WaitTimeout(
                f"no {consistency} version of {list(tables)} met "
                + (f"barrier >= {min_barrier}" if min_barrier is not None else f"staleness <= {max_staleness_seconds}s")
                + " before the timeout"
            )
        wait = poll_seconds if remaining is None else min(poll_seconds, remaining)
        try:
            found = await api.versions(
                tables,
                consistency,
                min_barrier=min_barrier,
                max_staleness_seconds=max_staleness_seconds,
                wait_seconds=wait,
            )
        except Unavailable as exc:
            pause = random.uniform(0, backoff)  # full jitter: waiters do not come back in step
            if remaining is not None:
                pause = min(pause, max(remaining, 0.0))
            log.warning("MetaService unavailable (%s); asking again in %.2fs", exc, pause)
            await asyncio.sleep(pause)
            backoff = min(backoff * 2, _BACKOFF_MAX)
            continue
        except MetaServiceError:
            raise
        backoff = _BACKOFF_FIRST
        if found is not None:
            return found
