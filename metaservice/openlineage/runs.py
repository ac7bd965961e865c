"""Barrier runs that ended during a request, handed to the OpenLineage emitter once the request succeeded.

The protocol calls `run_committed` / `run_aborted` right after its write (a line each in `services/barriers.py`);
they only append to the request's outbox, a list in a context variable that `RunOutbox` (a pure ASGI
middleware in `api/openlineage_outbox.py`, installed only when an OpenLineage URL is configured) sets for each
request. When the answer is a
success the middleware gives the runs to the emitter's queue; otherwise they are dropped, because the change
did not happen: an abort made inside a registration or rollback transaction is only real once that transaction
commits, and the request answers 2xx exactly then. Without an emitter the hooks cost one context variable read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from metaservice.domain.world import JobView, RunView, World


@dataclass(frozen=True)
class EndedRun:
    """What the emitter needs to describe one barrier run of a job that was committed or aborted."""

    job_id: str
    barrier: int
    status: Literal["committed", "aborted"]
    inputs: Mapping[str, Any]  # table → {"snapshot_id", "previous_snapshot_id"}, as the run was handed out
    outputs: Mapping[str, int | None]  # sink → snapshot committed (None: aborted)
    aborted_by: Literal["job", "server"] | None
    reason: str | None
    ended_at: float  # Unix time


_outbox: ContextVar[list[EndedRun] | None] = ContextVar("metaservice_openlineage_outbox", default=None)


def run_committed(job_id: str, run: RunView, snapshots: Mapping[str, int]) -> None:
    """The job committed `run` with these sink snapshots (the write succeeded)."""
    box = _outbox.get()
    if box is not None:
        box.append(
            EndedRun(job_id, run.barrier, "committed", dict(run.inputs), dict(snapshots), None, None, time.time())
        )


def run_aborted(world: World, job: JobView, run: RunView, reason: str, *, by: Literal["job", "server"]) -> None:
    """`run` of `job` was aborted: by the job itself, or by the server (a lineage change, unregister, rollback)."""
    box = _outbox.get()
    if box is not None:
        sinks: dict[str, int | None] = {world.tables[t].name: None for t in job.sinks}
        box.append(EndedRun(job.name, run.barrier, "aborted", dict(run.inputs), sinks, by, reason, time.time()))


def drain(box: list[EndedRun]) -> list[EndedRun]:
    """One entry per (job, barrier, outcome): a transaction re-run after a deadlock calls the hooks again."""
    seen: dict[tuple[str, int, str], EndedRun] = {}
    for run in box:
        seen.setdefault((run.job_id, run.barrier, run.status), run)
    return list(seen.values())


def collecting() -> tuple[list[EndedRun], Token[list[EndedRun] | None]]:
    """Start collecting the runs that end in this context (a request); `stop(token)` ends it."""
    box: list[EndedRun] = []
    return box, _outbox.set(box)


def stop(token: Token[list[EndedRun] | None]) -> None:
    _outbox.reset(token)
