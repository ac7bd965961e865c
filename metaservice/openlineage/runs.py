"""Barrier runs that ended during a request, handed to the OpenLineage emitter once the request succeeded.

The protocol calls `run_committed` / `run_aborted` right after its write (a line each in `services/barriers.py`);
they only append to the request's outbox, a list in a context variable that `RunOutbox` (a pure ASGI
middleware in `api/openlineage_outbox.py`, installed only when an OpenLineage URL is configured) sets for each
request. When the answer is a
success the middleware gives the runs to the emitter's queue; otherwise they are dropped, because the change
did not happen: an abort made inside a registration or rollback transaction is only real once that transaction
commits, and the request answers 2xx exactly then. Without an emitter the hooks cost one context variable read.

A run the job itself ends (commit, or its own abort) in a request naming its parent run (`ParentRun`: an
orchestrator's task run, from the `X-OpenLineage-Parent` header the API layer parses) carries that parent.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from metaservice.domain.world import JobView, RunView, World


_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"


@dataclass(frozen=True)
class ParentRun:
    """The OpenLineage run that started the job's run (an Airflow task instance's run, say): the `parent` facet."""

    namespace: str
    name: str
    run_id: str  # a UUID, in its canonical (lower case) form

    FORMAT: ClassVar[str] = "<namespace>/<job name>/<run id>"
    # Visible ASCII; the namespace ends at the first '/', the run id (a UUID) starts after the last.
    PATTERN: ClassVar[str] = rf"^[\x21-\x2e\x30-\x7e]+/[\x21-\x7e]+/{_UUID}$"

    @classmethod
    def parse(cls, value: str) -> ParentRun:
        """Read `<namespace>/<job name>/<run id>` (`PATTERN`): the form of Airflow's `lineage_parent_id` macro and
        of the `OPENLINEAGE_PARENT_ID` variable; the job name is what lies between the namespace and the run id
        (it may hold '/'). Raises `ValueError` saying what is wrong."""
        namespace, _, rest = value.partition("/")
        name, _, run_id = rest.rpartition("/")
        if re.fullmatch(cls.PATTERN, value) is not None:
            return cls(namespace, name, run_id.lower())
        if not namespace or not name or not run_id:
            raise ValueError(f"expected {cls.FORMAT}, three non-empty parts, got {value!r}")
        if re.fullmatch(_UUID, run_id) is None:
            raise ValueError(f"the run id {run_id!r} (after the last '/') is not a UUID (8-4-4-4-12 hex digits)")
        raise ValueError(f"expected {cls.FORMAT} in visible ASCII characters (no spaces), got {value!r}")


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
    parent: ParentRun | None = None  # the run that started this one, when the job named it


_outbox: ContextVar[list[EndedRun] | None] = ContextVar("metaservice_openlineage_outbox", default=None)


def run_committed(job_id: str, run: RunView, snapshots: Mapping[str, int], *, parent: ParentRun | None) -> None:
    """The job committed `run` with these sink snapshots (the write succeeded), in a request naming `parent`."""
    box = _outbox.get()
    if box is not None:
        box.append(
            EndedRun(
                job_id, run.barrier, "committed", dict(run.inputs), dict(snapshots), None, None, time.time(), parent
            )
        )


def run_aborted(
    world: World, job: JobView, run: RunView, reason: str, *, by: Literal["job", "server"], parent: ParentRun | None
) -> None:
    """`run` of `job` was aborted: by the job itself (in a request naming `parent`), or by the server (a lineage
    change, unregister, rollback: no parent, the request was not the job's)."""
    box = _outbox.get()
    if box is not None:
        sinks: dict[str, int | None] = {world.tables[t].name: None for t in job.sinks}
        box.append(EndedRun(job.name, run.barrier, "aborted", dict(run.inputs), sinks, by, reason, time.time(), parent))


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
