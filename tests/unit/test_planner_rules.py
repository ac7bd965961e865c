"""The planner's rules as a table: (world, step) -> (outcome, row changes), with no database.

Each row builds a small `World` with `Lineage` (barriers, tables with their ranges, jobs with their runs), takes one
step through the planner's public entry points (`next_step`, `commit`, `abort`, `barrier_after`) and compares the
answer and the writes with what docs/design.md ("Rules for a changing lineage", numbered here as there, and the walk
of planner.py's docstring) says. Writes are compared by table and job name: `ranges` the new ranges
(table, first, last, snapshot, kind, job), `ends` the stored ranges extended ((table, first) -> new last), `runs` the
new runs (job, first, barrier, status, reason), `run_ends` the stored runs extended ((job, first) -> new
barrier), `lasts` each job's newest settled barrier.

Every row is also checked for what holds for every plan: completions are never changed (a stored range is only
extended, and only the newest of its table: rule 9), and the plan expects the version it read of every job it
writes (the compare-and-set).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from metaservice.domain.world import JobView, Range, RunView, TableView, World
from metaservice.services.planner import (
    Allocate,
    Idle,
    InputAt,
    NeedAfter,
    NeedJobs,
    NeedRanges,
    Outcome,
    Planner,
    Process,
    Wait,
)

RangeSpec = tuple[int, int | None, int | None, str, str | None]  # first, last (None: open), snapshot, kind, job


def run(
    first: int,
    barrier: int | None = None,
    status: str = "committed",
    *,
    inputs: Mapping[str, int | tuple[int, int | None]] | None = None,
    outputs: Mapping[str, int] | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """A stored run: `inputs` name -> snapshot (or (snapshot, previous)), `outputs` sink -> snapshot."""
    read = {}
    for name, value in (inputs or {}).items():
        snapshot, previous = value if isinstance(value, tuple) else (value, None)
        read[name] = {"snapshot_id": snapshot, "previous_snapshot_id": previous}
    return {
        "first": first,
        "barrier": first if barrier is None else barrier,
        "status": status,
        "inputs": read,
        "outputs": dict(outputs or {}),
        "reason": reason,
    }


@dataclass
class Lineage:
    """A world described by name: the barriers issued, each table's ranges and writer, each job's state."""

    barriers: Sequence[int]
    tables: dict[str, tuple[str | None, list[RangeSpec]]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    known_after: Sequence[int] | None = None  # barriers whose successor the world holds (default: all)
    windows: dict[str, int] = field(default_factory=dict)  # table -> the first barrier its known ranges cover
    answered: Sequence[int] = ()  # more "first barrier after x" questions the world holds answers to

    def table(self, name: str, *ranges: RangeSpec, writer: str | None = None) -> Lineage:
        self.tables[name] = (writer, list(ranges))
        return self

    def job(
        self,
        name: str,
        *,
        sources: Sequence[str] = (),
        sinks: Sequence[str] = (),
        last: int | None = None,
        committed: dict[str, Any] | None = None,
        last_run: dict[str, Any] | None = None,
        in_flight: dict[str, Any] | None = None,
        lineage_after: int | None = 0,
        active: bool = True,
    ) -> Lineage:
        self.jobs[name] = {
            "sources": list(sources),
            "sinks": list(sinks),
            "last": last,
            "committed": committed,
            "last_run": last_run if last_run is not None else committed,
            "in_flight": in_flight,
            "lineage_after": lineage_after,
            "active": active,
        }
        return self

    def after(self, barrier: int | None) -> int | None:
        later = [b for b in self.barriers if barrier is not None and b > barrier]
        return min(later) if later else None

    def before(self, barrier: int) -> int | None:
        earlier = [b for b in self.barriers if b < barrier]
        return max(earlier) if earlier else None

    def build(self, *, leave_out: Sequence[str] = ()) -> World:
        """The world a gather would answer (jobs in `leave_out` not gathered: an upstream writer asked for)."""
        head = max(self.barriers) if self.barriers else None
        job_ids = {name: i for i, name in enumerate(self.jobs, start=1)}
        table_ids = {name: i for i, name in enumerate(self.tables, start=101)}
        next_id = iter(range(1001, 100000))
        tables: dict[int, TableView] = {}
        for name, (writer, specs) in self.tables.items():
            tid = table_ids[name]
            ranges = [
                Range(next(next_id), tid, first, last, snapshot, kind, None if job is None else job_ids[job])
                for first, last, snapshot, kind, job in specs
            ]
            newest = ranges[-1] if ranges else None
            outputs = [r for r in ranges if r.snapshot is not None]
            first = ranges[0].first if ranges else None
            view = TableView(
                id=tid,
                name=name,
                writer_id=None if writer is None else job_ids[writer],
                newest=newest,
                last_output=(outputs[-1].snapshot, outputs[-1].job_id) if outputs and outputs[-1].snapshot else None,
                first_barrier=first,
                first_complete=outputs[0].first if outputs else None,
                before_first=None if first is None else self.before(first),
                after_frontier=None if newest is None or newest.last is None else self.after(newest.last),
                writer_version=None if writer is None else 1,
            )
            if newest is not None:
                covers_from = self.windows.get(name, first)
                assert covers_from is not None
                window = [r for r in ranges if r.last is None or r.last >= covers_from]
                view.ranges = {r.first: r for r in window}
                view.ranges[newest.first] = newest
                upper = head if newest.last is None else newest.last
                assert upper is not None
                view.known = [(covers_from, upper)]
            tables[tid] = view
        jobs: dict[int, JobView] = {}
        for name, spec in self.jobs.items():
            if name in leave_out:
                continue

            def view_of(data: dict[str, Any] | None, *, stored: bool = True) -> RunView | None:
                if data is None:
                    return None
                return RunView(
                    next(next_id) if stored else None,
                    data["first"],
                    data["barrier"],
                    data["status"],
                    dict(data["inputs"]),
                    dict(data["outputs"]),
                    data["reason"],
                )

            committed = view_of(spec["committed"])
            last_run = committed if spec["last_run"] is spec["committed"] else view_of(spec["last_run"])
            jobs[job_ids[name]] = JobView(
                id=job_ids[name],
                name=name,
                active=spec["active"],
                last=spec["last"],
                version=7,
                sources=[table_ids[t] for t in spec["sources"]],
                sinks=[table_ids[t] for t in spec["sinks"]],
                in_flight=view_of(spec["in_flight"]),
                last_committed=committed,
                last_run=last_run,
                lineage_after=spec["lineage_after"],
                after_last=self.after(spec["last"]),
            )
        placed = self.barriers if self.known_after is None else self.known_after
        after = {b: self.after(b) for b in [*placed, *self.answered]}
        before_head = self.before(head) if head is not None else None
        return World(head, before_head, jobs, tables, after)


def summary(world: World, planner: Planner) -> dict[str, Any]:
    """The plan's writes by name (see the module's docstring)."""
    tables = {t.id: t.name for t in world.tables.values()}
    jobs = {j.id: j.name for j in world.jobs.values()}
    stored = {r.id: (tables[r.table_id], r.first) for t in world.tables.values() for r in t.ranges.values()}
    runs = {r.id: (jobs[j.id], r.first) for j in world.jobs.values() for r in (j.last_run, j.last_committed) if r}
    w = planner.writes
    return {
        "ranges": [
            (tables[r.table_id], r.first, r.last, r.snapshot, r.kind, None if r.job_id is None else jobs[r.job_id])
            for r in w.new_ranges
        ],
        "ends": {stored[rid]: last for rid, last in w.range_ends.items()},
        "runs": [(jobs[r.job_id], r.first, r.barrier, r.status, r.reason) for r in w.new_runs],
        "run_ends": {runs[rid]: last for rid, last in w.run_ends.items()},
        "lasts": {jobs[j]: b for j, b in w.job_lasts.items()},
    }


def check_every_plan(before: World, planner: Planner) -> None:
    """What holds for every plan: stored ranges are only extended, and only the newest of their table (rule 9:
    completions never change); every job written is expected at the version read."""
    newest = {t.newest.id for t in before.tables.values() if t.newest is not None}
    lasts = {r.id: r.last for t in before.tables.values() for r in t.ranges.values()}
    for rid, last in planner.writes.range_ends.items():
        assert rid in newest, f"a plan changed stored range {rid}, which is not the newest of its table"
        stored = lasts[rid]
        assert stored is not None and last > stored, "a plan shortened or reopened a stored range"
    touched = {r.job_id for r in planner.writes.new_runs} | set(planner.writes.job_lasts)
    assert touched <= set(planner.writes.expect), "a plan writes a job without expecting its version"
    assert all(planner.writes.expect[j] == before.jobs[j].version for j in touched)


def next_of(lineage: Lineage, job: str, *, start: str | int | None = None) -> tuple[Outcome, dict[str, Any]]:
    world = lineage.build()
    before = world.clone()
    planner = Planner(world)
    ids = {j.name: j.id for j in world.jobs.values()}
    outcome = planner.next_step(ids[job], start=start)
    check_every_plan(before, planner)
    return outcome, summary(world, planner)


NO_WRITES: dict[str, Any] = {"ranges": [], "ends": {}, "runs": [], "run_ends": {}, "lasts": {}}


def at(snapshot: int, previous: int | None = None) -> InputAt:
    return InputAt(snapshot, previous)


# --- worlds -----------------------------------------------------------------------------------------------------
# r, s: roots (sealed ranges, the newest open); x, y: tables jobs write; barriers 10, 20, 30 unless said.


def chain(*, r_at_30: int = 2) -> Lineage:
    """r -> j -> x: j processed 10 and completed 20 idle (r at 1); r holds 2 from 30 (or `r_at_30`)."""
    return (
        Lineage([10, 20, 30])
        .table("r", (10, 29, 1, "sealed", None), (30, None, r_at_30, "sealed", None))
        .table("x", (10, 20, 5, "committed", "j"), writer="j")
        .job(
            "j",
            sources=["r"],
            sinks=["x"],
            last=20,
            committed=run(10, inputs={"r": 1}, outputs={"x": 5}),
            last_run=run(20, status="idle", reason="inputs unchanged"),
        )
    )


def two_step() -> Lineage:
    """r -> up -> x -> down -> y: both settled 10; r holds 1 throughout, x holds 5."""
    return (
        Lineage([10, 20])
        .table("r", (10, None, 1, "sealed", None))
        .table("x", (10, 10, 5, "committed", "up"), writer="up")
        .table("y", (10, 10, 8, "committed", "down"), writer="down")
        .job("up", sources=["r"], sinks=["x"], last=10, committed=run(10, inputs={"r": 1}, outputs={"x": 5}))
        .job("down", sources=["x"], sinks=["y"], last=10, committed=run(10, inputs={"x": 5}, outputs={"y": 8}))
    )


@dataclass(frozen=True)
class Row:
    """One rule: a world, the job that asks `next` (with `start`), what it answers and writes."""

    name: str
    world: Callable[[], Lineage]
    job: str
    outcome: Outcome
    writes: dict[str, Any]
    start: str | int | None = None


ROWS = [
    # --- the walk: process, idle, skip, wait ------------------------------------------------------------------
    Row(
        "process: a new root snapshot at the next barrier, the previous one named, the sink's baseline handed out",
        lambda: chain(),
        "j",
        Process(30, {"r": at(2, 1)}, {"x": 5}),
        {**NO_WRITES, "runs": [("j", 30, 30, "in_flight", None)]},
    ),
    Row(
        "rule 4, idle: same inputs, same snapshots, the sink still holds the output: extended, no work",
        lambda: chain(r_at_30=1),
        "j",
        Idle(),
        {**NO_WRITES, "ends": {("x", 10): 30}, "run_ends": {("j", 20): 30}, "lasts": {"j": 30}},
    ),
    Row(
        "rule 4, a changed sink set processes: the sink does not hold the last committed output",
        lambda: (
            chain(r_at_30=1)
            .table("x2", writer="j")
            .job("j", sources=["r"], sinks=["x", "x2"], last=20, committed=run(10, inputs={"r": 1}, outputs={"x": 5}))
        ),
        "j",
        Process(30, {"r": at(1, 1)}, {"x": 5, "x2": None}),
        {**NO_WRITES, "runs": [("j", 30, 30, "in_flight", None)]},
    ),
    Row(
        "rule 4, a changed input set processes; previous_snapshot_id is null for an input not read before",
        lambda: (
            chain(r_at_30=1)
            .table("s", (10, None, 4, "sealed", None))
            .job("j", sources=["r", "s"], sinks=["x"], last=20, committed=run(10, inputs={"r": 1}, outputs={"x": 5}))
        ),
        "j",
        Process(30, {"r": at(1, 1), "s": at(4)}, {"x": 5}),
        {**NO_WRITES, "runs": [("j", 30, 30, "in_flight", None)]},
    ),
    Row(
        "skip: an input never completes the barrier (its writer aborted it): the sink never completes it either",
        lambda: (
            Lineage([10, 20, 30])
            .table("x", (10, 10, 5, "committed", "up"), (20, 20, None, "aborted", "up"), (30, 30, 6, "committed", "up"))
            .table("y", (10, 10, 8, "committed", "down"), writer="down")
            .job("up", sinks=["x"], last=30)
            .job("down", sources=["x"], sinks=["y"], last=10, committed=run(10, inputs={"x": 5}, outputs={"y": 8}))
        ),
        "down",
        Process(30, {"x": at(6, 5)}, {"y": 8}, skipped=(20,)),
        {
            **NO_WRITES,
            "ranges": [("y", 20, 20, None, "aborted", "down")],
            "runs": [
                ("down", 20, 20, "aborted", "skipped: input x does not complete barrier 20"),
                ("down", 30, 30, "in_flight", None),
            ],
            "lasts": {"down": 20},
        },
    ),
    Row(
        "skip: a root that never held data never completes a barrier; nothing after it: idle, naming the skip",
        lambda: (
            Lineage([10, 20])
            .table("r", (10, None, 1, "sealed", None))
            .table("s")
            .table("y", writer="new")
            .job("new", sources=["r", "s"], sinks=["y"])
        ),
        "new",
        Idle(skipped=(20,)),
        {
            **NO_WRITES,
            "ranges": [("y", 20, 20, None, "aborted", "new")],
            "runs": [("new", 20, 20, "aborted", "skipped: input s does not complete barrier 20")],
            "lasts": {"new": 20},
        },
    ),
    Row(
        "wait: an input's writer has not settled the barrier and is busy with it: named in waiting_for",
        lambda: (
            Lineage([10, 20])
            .table("r", (10, 19, 1, "sealed", None), (20, None, 2, "sealed", None))
            .table("x", (10, 10, 5, "committed", "up"), writer="up")
            .table("y", (10, 10, 8, "committed", "down"), writer="down")
            .job(
                "up",
                sources=["r"],
                sinks=["x"],
                last=10,
                committed=run(10, inputs={"r": 1}, outputs={"x": 5}),
                in_flight=run(20, status="in_flight", inputs={"r": 2}),
            )
            .job("down", sources=["x"], sinks=["y"], last=10, committed=run(10, inputs={"x": 5}, outputs={"y": 8}))
        ),
        "down",
        Wait(20, ("x",)),
        NO_WRITES,
    ),
    Row(
        "wait: a new job whose input never completed anything waits (no implicit start)",
        lambda: (
            Lineage([10])
            .table("x", writer="up")
            .table("y", writer="down")
            .job("up", sinks=["x"])
            .job("down", sources=["x"], sinks=["y"])
        ),
        "down",
        Wait(10, ("x",)),
        NO_WRITES,
    ),
    Row(
        "settle upstream writers: an unchanged upstream job completes the barrier idle for its reader",
        lambda: two_step(),
        "down",
        Idle(),
        {
            **NO_WRITES,
            "ends": {("x", 10): 20, ("y", 10): 20},
            "runs": [("up", 20, 20, "idle", "inputs unchanged"), ("down", 20, 20, "idle", "inputs unchanged")],
            "lasts": {"up": 20, "down": 20},
        },
    ),
    Row(
        "a changed upstream writer is never advanced by its reader: the reader waits",
        lambda: two_step().table("r", (10, 19, 1, "sealed", None), (20, None, 2, "sealed", None)),
        "down",
        Wait(20, ("x",)),
        NO_WRITES,
    ),
    # --- starting ---------------------------------------------------------------------------------------------
    Row(
        "a new job starts at the newest barrier its inputs settled (start newest, the default)",
        lambda: (
            Lineage([10, 20, 30])
            .table("r", (10, 19, 1, "sealed", None), (20, None, 2, "sealed", None))
            .table("y", writer="new")
            .job("new", sources=["r"], sinks=["y"])
        ),
        "new",
        Process(30, {"r": at(2)}, {"y": None}),
        {**NO_WRITES, "runs": [("new", 30, 30, "in_flight", None)]},
    ),
    Row(
        "start earliest: the first barrier at which every input holds data (a backfill)",
        lambda: (
            Lineage([10, 20, 30])
            .table("r", (10, 19, 1, "sealed", None), (20, None, 2, "sealed", None))
            .table("s", (20, None, 7, "sealed", None))
            .table("y", writer="new")
            .job("new", sources=["r", "s"], sinks=["y"])
        ),
        "new",
        Process(20, {"r": at(2), "s": at(7)}, {"y": None}),
        {**NO_WRITES, "runs": [("new", 20, 20, "in_flight", None)]},
        start="earliest",
    ),
    Row(
        "start at a barrier value: the first barrier at or after it",
        lambda: (
            Lineage([10, 20, 30], answered=[14])
            .table("r", (10, 19, 1, "sealed", None), (20, None, 2, "sealed", None))
            .table("y", writer="new")
            .job("new", sources=["r"], sinks=["y"])
        ),
        "new",
        Process(20, {"r": at(2)}, {"y": None}),
        {**NO_WRITES, "runs": [("new", 20, 20, "in_flight", None)]},
        start=15,
    ),
    # --- rules for a changing lineage -------------------------------------------------------------------------
    Row(
        "rules 1 and 6: a lineage change after the newest barrier takes effect at the next one: issue it",
        lambda: (
            chain(r_at_30=1)
            .table("s", (10, None, 4, "sealed", None))
            .job(
                "j",
                sources=["r", "s"],
                sinks=["x"],
                last=30,
                committed=run(10, inputs={"r": 1}, outputs={"x": 5}),
                lineage_after=30,
            )
        ),
        "j",
        Allocate(30),
        NO_WRITES,
    ),
    Row(
        "rule 1: a change before the newest barrier is in effect there: the job processes it, nothing to issue",
        lambda: (
            chain(r_at_30=1)
            .table("s", (10, None, 4, "sealed", None))
            .job(
                "j",
                sources=["r", "s"],
                sinks=["x"],
                last=20,
                committed=run(10, inputs={"r": 1}, outputs={"x": 5}),
                lineage_after=20,
            )
        ),
        "j",
        Process(30, {"r": at(1, 1), "s": at(4)}, {"x": 5}),
        {**NO_WRITES, "runs": [("j", 30, 30, "in_flight", None)]},
    ),
    Row(
        "rule 2: a reader of an orphan (its writer left after 10) waits, naming it",
        lambda: (
            Lineage([10, 20])
            .table("o", (10, 10, 5, "committed", "gone"))
            .table("y", (10, 10, 8, "committed", "down"), writer="down")
            .job("gone", sinks=[], last=10, active=False)
            .job("down", sources=["o"], sinks=["y"], last=10, committed=run(10, inputs={"o": 5}, outputs={"y": 8}))
        ),
        "down",
        Wait(20, ("o",)),
        NO_WRITES,
    ),
    Row(
        "rule 3: a writer starts after the table's history; its other sink never completes what it passed (a gap)",
        lambda: (
            Lineage([10, 20, 30])
            .table("r", (10, None, 1, "sealed", None))
            .table("x", (10, 10, 5, "committed", "j"), writer="j")
            .table("h", (10, 20, 3, "committed", "old"), writer="j")  # handed over: its old writer settled 20
            .job("j", sources=["r"], sinks=["x", "h"], last=10, committed=run(10, inputs={"r": 1}, outputs={"x": 5}))
            .job("old", last=20)
        ),
        "j",
        Process(30, {"r": at(1, 1)}, {"x": 5, "h": 3}),
        {
            **NO_WRITES,
            "ranges": [("x", 20, 20, None, "gap", "j")],
            "runs": [
                ("j", 20, 20, "aborted", "skipped: a sink was settled by another writer"),
                ("j", 30, 30, "in_flight", None),
            ],
            "lasts": {"j": 20},
        },
    ),
    Row(
        "rule 5: after an aborted barrier the job compares with its last committed one: new data processes",
        lambda: (
            Lineage([10, 20, 30])
            .table("r", (10, 19, 1, "sealed", None), (20, None, 2, "sealed", None))
            .table("x", (10, 10, 5, "committed", "j"), (20, 20, None, "aborted", "j"), writer="j")
            .job(
                "j",
                sources=["r"],
                sinks=["x"],
                last=20,
                committed=run(10, inputs={"r": 1}, outputs={"x": 5}),
                last_run=run(20, status="aborted", inputs={"r": 2}, reason="aborted by the job"),
            )
        ),
        "j",
        Process(30, {"r": at(2, 1)}, {"x": 5}),
        {**NO_WRITES, "runs": [("j", 30, 30, "in_flight", None)]},
    ),
    Row(
        "rule 8: an ingestion step processes the newest barrier after its last one",
        lambda: (
            Lineage([10, 20])
            .table("x", (10, 10, 5, "committed", "ing"), writer="ing")
            .job("ing", sinks=["x"], last=10, committed=run(10, outputs={"x": 5}))
        ),
        "ing",
        Process(20, {}, {"x": 5}),
        {**NO_WRITES, "runs": [("ing", 20, 20, "in_flight", None)]},
    ),
    Row(
        "rule 8: barriers between its last one and the newest complete idle (its sinks held their snapshots)",
        lambda: (
            Lineage([10, 20, 30, 40])
            .table("x", (10, 10, 5, "committed", "ing"), writer="ing")
            .job("ing", sinks=["x"], last=10, committed=run(10, outputs={"x": 5}))
        ),
        "ing",
        Process(40, {}, {"x": 5}),
        {
            **NO_WRITES,
            "ends": {("x", 10): 30},
            "runs": [("ing", 20, 30, "idle", "inputs unchanged"), ("ing", 40, 40, "in_flight", None)],
            "lasts": {"ing": 30},
        },
    ),
    Row(
        "rule 8: a step that lost its last source never pairs its old output with newer barriers: never there",
        lambda: (
            Lineage([10, 20, 30, 40])
            .table("x", (10, 10, 5, "committed", "ing"), writer="ing")
            .job("ing", sinks=["x"], last=10, committed=run(10, inputs={"r": 1}, outputs={"x": 5}))
        ),
        "ing",
        Process(40, {}, {"x": 5}),
        {
            **NO_WRITES,
            "ranges": [("x", 20, 30, None, "aborted", "ing")],
            "runs": [
                ("ing", 20, 30, "aborted", "skipped: the sinks changed since the job's last barrier"),
                ("ing", 40, 40, "in_flight", None),
            ],
            "lasts": {"ing": 30},
        },
    ),
    Row(
        "rule 8: an ingestion step with nothing newer than its last barrier is idle",
        lambda: (
            Lineage([10])
            .table("x", (10, 10, 5, "committed", "ing"), writer="ing")
            .job("ing", sinks=["x"], last=10, committed=run(10, outputs={"x": 5}))
        ),
        "ing",
        Idle(),
        NO_WRITES,
    ),
    Row(
        "rule 8: a new ingestion step processes the newest barrier",
        lambda: Lineage([10, 20]).table("x", writer="ing").job("ing", sinks=["x"], lineage_after=20),
        "ing",
        Process(20, {}, {"x": None}),
        {**NO_WRITES, "runs": [("ing", 20, 20, "in_flight", None)]},
    ),
    Row(
        "rules 6 and 8: an ingestion step given a sink after the newest barrier, which it settled, needs one",
        lambda: (
            Lineage([10])
            .table("x", (10, 10, 5, "committed", "ing"), writer="ing")
            .table("x2", writer="ing")
            .job("ing", sinks=["x", "x2"], last=10, committed=run(10, outputs={"x": 5}), lineage_after=10)
        ),
        "ing",
        Allocate(10),
        NO_WRITES,
    ),
    Row(
        "rule 10: nothing to plan is an answer, never an error: no barrier issued yet",
        lambda: Lineage([]).table("r").table("y", writer="new").job("new", sources=["r"], sinks=["y"]),
        "new",
        Allocate(0),
        NO_WRITES,
    ),
    Row(
        "rule 11: a barrier in flight is handed out again, with its inputs and each sink's baseline",
        lambda: chain().job(
            "j",
            sources=["r"],
            sinks=["x"],
            last=20,
            committed=run(10, inputs={"r": 1}, outputs={"x": 5}),
            in_flight=run(30, status="in_flight", inputs={"r": (2, 1)}),
        ),
        "j",
        Process(30, {"r": at(2, 1)}, {"x": 5}),
        NO_WRITES,
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_next_step(row: Row) -> None:
    outcome, writes = next_of(row.world(), row.job, start=row.start)
    assert outcome == row.outcome
    assert writes == row.writes


# --- the walk asks for state its world lacks ----------------------------------------------------------------------


def test_an_upstream_writer_the_world_does_not_hold_is_asked_for() -> None:
    world = two_step().build(leave_out=["up"])
    with pytest.raises(NeedJobs) as need:
        Planner(world).next_step(2)  # down
    assert need.value.job_ids == [1]  # up


def test_ranges_before_the_window_are_asked_for_from_the_barrier_the_walk_reached() -> None:
    lineage = chain(r_at_30=1)
    lineage.windows["r"] = 30  # the gather's window of r starts at 30: barrier 30's state is known, 20's is not
    lineage.job("j", sources=["r"], sinks=["x"], last=10, committed=run(10, inputs={"r": 1}, outputs={"x": 5}))
    lineage.table("x", (10, 10, 5, "committed", "j"), writer="j")
    world = lineage.build()
    with pytest.raises(NeedRanges) as need:
        Planner(world).next_step(1)
    assert (need.value.table_id, need.value.barrier) == (101, 20)  # r, from barrier 20


def test_a_barrier_the_world_cannot_place_is_asked_for() -> None:
    lineage = chain()
    lineage.known_after = []
    planner = Planner(lineage.build())
    with pytest.raises(NeedAfter) as need:
        planner.barrier_after(15)  # no range of any table ends at 15
    assert need.value.barrier == 15
    assert planner.barrier_after(20) == 30  # x's newest range ends at 20: the next is its after_frontier
    assert planner.barrier_after(30) is None  # the newest


# --- commit and abort -------------------------------------------------------------------------------------------


def in_flight_world() -> tuple[World, Planner, RunView]:
    lineage = chain().job(
        "j",
        sources=["r"],
        sinks=["x"],
        last=20,
        committed=run(10, inputs={"r": 1}, outputs={"x": 5}),
        in_flight=run(30, status="in_flight", inputs={"r": (2, 1)}),
    )
    world = lineage.build()
    run_view = world.jobs[1].in_flight
    assert run_view is not None
    return world, Planner(world), run_view


def test_commit_puts_the_new_snapshot_after_the_sinks_history_and_settles_the_barrier() -> None:
    world, planner, in_flight = in_flight_world()
    before = world.clone()
    planner.commit(1, 30, {"x": 6}, in_flight)
    check_every_plan(before, planner)
    assert summary(world, planner) == {**NO_WRITES, "ranges": [("x", 30, 30, 6, "committed", "j")], "lasts": {"j": 30}}
    assert planner.writes.finished_runs == [(in_flight.id, "committed", {"x": 6}, None)]
    assert planner.writes.latest == {102: 6}


def test_commit_of_the_same_snapshot_extends_the_sinks_newest_range() -> None:
    world, planner, in_flight = in_flight_world()
    before = world.clone()
    planner.commit(1, 30, {"x": 5}, in_flight)  # the output did not change: one range, one more barrier
    check_every_plan(before, planner)
    assert summary(world, planner) == {**NO_WRITES, "ends": {("x", 10): 30}, "lasts": {"j": 30}}


def test_rule_5_an_abort_skips_exactly_its_barrier_and_the_next_step_plans_after_it() -> None:
    world, planner, in_flight = in_flight_world()
    before = world.clone()
    planner.abort(1, in_flight, "lineage changed")  # rule 7: what a lineage change does to a barrier in flight
    check_every_plan(before, planner)
    assert summary(world, planner) == {
        **NO_WRITES,
        "ranges": [("x", 30, 30, None, "aborted", "j")],
        "lasts": {"j": 30},
    }
    assert planner.writes.finished_runs == [(in_flight.id, "aborted", None, "lineage changed")]
    assert planner.next_step(1) == Idle()  # nothing after 30 yet: the aborted barrier is not offered again
