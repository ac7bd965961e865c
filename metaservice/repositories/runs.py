"""SQL for job runs: each job's barrier history (written by the protocol's one statement, see protocol.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from metaservice.db.database import Connection
from metaservice.repositories.driver import fetch_all, fetch_as, fetch_one_as


@dataclass(slots=True)
class RunRow:
    """One row of `job_runs`: what the job did for the barriers first_barrier … barrier."""

    id: int
    job_id: int
    first_barrier: int
    barrier: int
    status: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    reason: str | None
    inputs_ready_at: datetime | None
    started_at: datetime
    finished_at: datetime | None


_COLUMNS = (
    "id, job_id, first_barrier, barrier, status, inputs, outputs, reason, inputs_ready_at, started_at, finished_at"
)
_IN_FLIGHT = f"SELECT {_COLUMNS} FROM job_runs WHERE job_id = %(job_id)s AND status = 'in_flight'"
_HISTORY = f"""
    SELECT {_COLUMNS} FROM job_runs WHERE job_id = %(job_id)s AND first_barrier < %(before)s
     ORDER BY first_barrier DESC LIMIT %(limit)s
"""
_IN_FLIGHT_READING = """
    SELECT j.name, r.barrier, r.inputs -> %(table)s FROM job_runs r JOIN jobs j ON j.id = r.job_id
     WHERE r.status = 'in_flight' AND r.inputs ? %(table)s
"""
_IN_FLIGHT_OF = f"""
    SELECT {_COLUMNS} FROM job_runs WHERE job_id = ANY(CAST(%(ids)s AS bigint[])) AND status = 'in_flight'
"""


async def in_flight(conn: Connection, *, job_id: int) -> RunRow | None:
    return await fetch_one_as(conn, RunRow, _IN_FLIGHT, {"job_id": job_id})


async def in_flight_of(conn: Connection, *, job_ids: list[int]) -> dict[int, RunRow]:
    return {r.job_id: r for r in await fetch_as(conn, RunRow, _IN_FLIGHT_OF, {"ids": job_ids})}


async def history(conn: Connection, *, job_id: int, limit: int, before_barrier: int | None = None) -> list[RunRow]:
    """The job's runs, newest first (before `before_barrier`, when given)."""
    before = before_barrier if before_barrier is not None else 2**63 - 1
    return await fetch_as(conn, RunRow, _HISTORY, {"job_id": job_id, "before": before, "limit": limit})


async def in_flight_reading(conn: Connection, *, table: str) -> list[tuple[str, int, dict[str, Any]]]:
    """(job name, barrier, inputs entry) of every in-flight run that reads `table`."""
    rows = await fetch_all(conn, _IN_FLIGHT_READING, {"table": table})
    return [(str(r[0]), int(r[1]), dict(r[2])) for r in rows]
