"""The barrier protocol's planning state: what a gather reads (`World` and its views) and what a plan writes
(`Writes`). A leaf module: the repositories fill and store these, the planner (services/planner.py) reads and
fills them; neither layer imports the other for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

# --- the gathered state ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Range:
    """`table_id` holds `snapshot` (None: never completes) at barriers first … last (None: open, a root)."""

    id: int | None  # None: written by this plan
    table_id: int
    first: int
    last: int | None
    snapshot: int | None
    kind: str
    job_id: int | None


@dataclass(slots=True)
class TableView:
    id: int
    name: str
    writer_id: int | None  # the current writer job, if any
    newest: Range | None
    last_output: tuple[int, int | None] | None  # (snapshot, writer job) of the newest range holding a snapshot
    first_barrier: int | None  # first barrier of its first range
    first_complete: int | None  # first barrier it holds a snapshot at
    before_first: int | None  # the barrier issued before `first_barrier`
    after_frontier: int | None  # the barrier issued after its newest range's last barrier
    unsealed: bool = False  # a root whose newest known snapshot no barrier sealed yet
    writer_version: int | None = None  # the writer's version when this view was gathered (repositories/protocol)
    ranges: dict[int, Range] = field(default_factory=dict)  # known ranges by first barrier
    known: list[tuple[int, int]] = field(default_factory=list)  # barrier intervals the known ranges cover fully

    def learn(self, ranges: Sequence[Range], *, covers_from: int, complete: bool, head: int | None) -> None:
        """Add ranges fetched from `covers_from` on (ascending); `complete`: they reach the newest range."""
        for r in ranges:
            self.ranges.setdefault(r.first, r)
        if not ranges and not complete:
            return
        last = ranges[-1].last if ranges else None
        upper = (head if last is None else last) if ranges else covers_from
        if complete and self.newest is not None:
            upper = head if self.newest.last is None else self.newest.last
        if upper is not None and upper >= covers_from:
            self.known.append((covers_from, upper))

    def covering(self, barrier: int) -> Range | Literal["unknown"] | None:
        """The known range covering `barrier`; None when none does (a hole); "unknown" when not fetched."""
        if not any(lo <= barrier <= hi for lo, hi in self.known):
            if self.newest is not None and self.newest.first <= barrier:
                return self.newest
            return "unknown"
        best: Range | None = None
        for first, r in self.ranges.items():
            if first <= barrier and (best is None or first > best.first):
                best = r
        if best is None or (best.last is not None and best.last < barrier):
            return None
        return best

    def next_range(self, after: int) -> Range | None:
        following = [r for first, r in self.ranges.items() if first > after]
        return min(following, key=lambda r: r.first) if following else None


@dataclass(slots=True)
class RunView:
    id: int | None
    first: int
    barrier: int
    status: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    reason: str | None


@dataclass(slots=True)
class JobView:
    id: int
    name: str
    active: bool
    last: int | None  # the newest barrier it settled
    version: int
    sources: list[int]  # table ids, by name
    sinks: list[int]
    in_flight: RunView | None
    last_committed: RunView | None
    last_run: RunView | None
    lineage_after: int | None  # the newest barrier issued when its lineage last changed
    after_last: int | None  # the barrier issued after `last`


@dataclass
class World:
    """Everything a plan reads. Tables are shared between the jobs that read and write them."""

    head: int | None
    before_head: int | None
    jobs: dict[int, JobView]
    tables: dict[int, TableView]
    after: dict[int, int | None] = field(default_factory=dict)  # extra "first barrier after x" answers

    def clone(self) -> World:
        """A copy a plan may change (plans record their outcome in the views as they go; a plan that stops to
        ask for more state is made again on a fresh copy). Five times cheaper than `copy.deepcopy`."""
        tables = {}
        for t in self.tables.values():
            ranges = {first: replace(r) for first, r in t.ranges.items()}
            newest = None if t.newest is None else ranges.get(t.newest.first) or replace(t.newest)
            tables[t.id] = replace(t, newest=newest, ranges=ranges, known=list(t.known))
        jobs = {
            j.id: replace(
                j,
                sources=list(j.sources),
                sinks=list(j.sinks),
                in_flight=None if j.in_flight is None else replace(j.in_flight),
                last_committed=None if j.last_committed is None else replace(j.last_committed),
                last_run=None if j.last_run is None else replace(j.last_run),
            )
            for j in self.jobs.values()
        }
        return World(self.head, self.before_head, jobs, tables, dict(self.after))


# --- what a plan writes -----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class NewRun:
    job_id: int
    first: int
    barrier: int
    status: str
    inputs: dict[str, Any]
    reason: str | None
    ready_ranges: list[int] = field(default_factory=list)  # stored input ranges the run's readiness comes from
    ready_now: bool = False  # an input range was written by this plan: inputs are ready now
    id: int | None = None  # the row's id, once stored (repositories/protocol.apply)


@dataclass
class Writes:
    """The outcome of a plan as row changes, applied by one statement if every job's version is unchanged."""

    expect: dict[int, int] = field(default_factory=dict)  # job id → version read
    range_ends: dict[int, int] = field(default_factory=dict)  # stored range id → new last barrier
    new_ranges: list[Range] = field(default_factory=list)
    run_ends: dict[int, int] = field(default_factory=dict)  # stored run id → new barrier (idle stretch grows)
    new_runs: list[NewRun] = field(default_factory=list)
    finished_runs: list[tuple[int, str, dict[str, int] | None, str | None]] = field(default_factory=list)
    job_lasts: dict[int, int] = field(default_factory=dict)
    latest: dict[int, int] = field(default_factory=dict)  # table id → snapshot (newest known, only raised)

    def __bool__(self) -> bool:
        return bool(self.expect)
