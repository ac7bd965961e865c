"""The barrier protocol's rules: what a job does next, decided in Python over a snapshot of the database.

This is the one module that decides (docs/design.md, "Protocol invariants" and "Rules for a changing lineage");
the database gathers the state (`repositories/protocol.py`, one statement) and stores the outcome (one
compare-and-set statement). Nothing here does I/O: when the plan needs state the gathered snapshot lacks, it
raises `NeedJobs` / `NeedRanges` / `NeedAfter`, the caller fetches it, and the plan is made again from scratch
(plans are deterministic functions of the state).

A table's state at barrier b (for a job reading it):
- complete(snapshot): a range with a snapshot covers b;
- never: a range without snapshot covers b (aborted, skipped, a hand-over gap), b lies before the table's first
  range, or the table is a root that never held data. A reader skips b;
- pending: b lies after the table's frontier (the newest barrier it settled): a reader waits.

A job's walk from its newest settled barrier, barrier by barrier (in stretches where nothing changes):
skip a barrier where an input is never; complete it idle when the job's input set, sink set and every input's
snapshot equal those of its last committed barrier and its sinks still hold that output; else process it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metaservice.domain.world import JobView, NewRun, Range, RunView, TableView, World, Writes

# One call settles at most this many stretches before answering; the next call goes on.
MAX_STEPS = 256
SETTLED_KINDS = ("committed", "idle")  # ranges holding a job's own output
NEVER_KINDS = ("aborted", "gap")


class NeedJobs(Exception):
    """The plan needs the state of these (upstream writer) jobs."""

    def __init__(self, job_ids: Iterable[int]) -> None:
        super().__init__(sorted(job_ids))
        self.job_ids = sorted(job_ids)


class NeedRanges(Exception):
    """The plan needs the ranges of `table_id` from barrier `barrier` on."""

    def __init__(self, table_id: int, barrier: int) -> None:
        super().__init__(table_id, barrier)
        self.table_id, self.barrier = table_id, barrier


class NeedAfter(Exception):
    """The plan needs the first barrier issued after `barrier`."""

    def __init__(self, barrier: int) -> None:
        super().__init__(barrier)
        self.barrier = barrier


# --- what a plan decides and writes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputAt:
    snapshot_id: int
    previous_snapshot_id: int | None


@dataclass(frozen=True)
class Process:
    barrier: int
    inputs: dict[str, InputAt]
    sinks: dict[str, int | None]  # sink → baseline snapshot
    skipped: tuple[int, ...] = ()


@dataclass(frozen=True)
class Wait:
    barrier: int | None
    waiting_for: tuple[str, ...]
    skipped: tuple[int, ...] = ()


@dataclass(frozen=True)
class Idle:
    skipped: tuple[int, ...] = ()


@dataclass(frozen=True)
class Allocate:
    """No barrier lets the job's lineage change take effect yet: issue one unless one followed `unless_after`."""

    unless_after: int


Outcome = Process | Wait | Idle | Allocate


# --- the planner ---------------------------------------------------------------------------------------------------


@dataclass
class _State:
    kind: Literal["complete", "never", "pending"]
    snapshot: int | None = None
    through: int | None = None  # the state holds from the barrier asked up to here
    range: Range | None = None


class Planner:
    """Plans one step of a job over a `World`, recording row changes in `writes`."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.writes = Writes()
        self._visited: set[int] = set()

    # --- entry points -------------------------------------------------------------------------------------------

    def next_step(self, job_id: int, *, start: str | int | None = None) -> Outcome:
        """The answer to `next` for a registered, active job."""
        job = self.world.jobs[job_id]
        self._visited.add(job.id)
        if job.in_flight is not None:
            return self._process_answer(job, job.in_flight, ())
        outcome = self._walk(job, settle_only=False, start=start)
        assert outcome is not None
        return outcome

    def settle(self, job_id: int) -> None:
        """Complete idle the barriers at which the job's inputs did not change (and skip those an input never
        completes), up to the first that needs work, settling the writers of lagging inputs first: what a
        downstream `next` does for its upstream writers, done for a reader (rule 12). A busy, retired or
        ingestion job is left alone: only it knows what it will do."""
        job = self.world.jobs[job_id]
        self._visited.add(job.id)
        if not job.active or job.in_flight is not None or not job.sources:
            return
        self._walk(job, settle_only=True, start=None)

    def commit(self, job_id: int, barrier: int, snapshots: Mapping[str, int], run: RunView) -> None:
        """Record the job's sink snapshots for its in-flight `barrier` (validated by the caller)."""
        job = self.world.jobs[job_id]
        self._touch(job)
        for sink in self._tables(job.sinks):
            follows = sink.newest is not None and sink.after_frontier == barrier
            self._put(sink, job, barrier, barrier, snapshots[sink.name], "committed", follows=follows)
            self.writes.latest[sink.id] = snapshots[sink.name]
        assert run.id is not None
        self.writes.finished_runs.append((run.id, "committed", dict(snapshots), None))
        self._advance(job, barrier)

    def abort(self, job_id: int, run: RunView, reason: str) -> None:
        """Give up the job's in-flight run: its barrier never completes in the job's sinks."""
        job = self.world.jobs[job_id]
        self._touch(job)
        for sink in self._tables(job.sinks):
            follows = sink.newest is not None and sink.after_frontier == run.barrier
            self._put(sink, job, run.barrier, run.barrier, None, "aborted", follows=follows)
        assert run.id is not None
        self.writes.finished_runs.append((run.id, "aborted", None, reason))
        self._advance(job, run.barrier)
        job.in_flight = None

    def barrier_after(self, barrier: int) -> int | None:
        """The first barrier issued after `barrier`, as far as the world tells (None: it is the newest; NeedAfter:
        the world does not hold it)."""
        return self._after(barrier)

    # --- the walk -------------------------------------------------------------------------------------------------

    def _walk(self, job: JobView, *, settle_only: bool, start: str | int | None) -> Outcome | None:
        world = self.world
        head = world.head
        sources, sinks = self._tables(job.sources), self._tables(job.sinks)
        sink_front = _max(*(self._frontier(s) for s in sinks))
        cursor = _max(job.last, sink_front)  # settled up to here: the job, or its sinks' history (rule 3)
        # Rule 6: a change of the job's lineage takes effect at the first barrier after it. Until one is issued, the
        # old lineage holds at every barrier: a sink the job no longer writes would hold strong reads of its
        # component back, and new edges would wait for unrelated new data.
        pending_change = (
            not settle_only and job.lineage_after is not None and (head is None or head <= job.lineage_after)
        )

        def quiet(skipped: Sequence[int]) -> Outcome:
            if pending_change:
                assert job.lineage_after is not None
                return Allocate(job.lineage_after)
            if not settle_only and cursor is not None and self._owes(job, sources, cursor):
                return Allocate(cursor)
            return Idle(tuple(skipped))

        if head is None:
            return None if settle_only else quiet(())
        if not sources:  # an ingestion step (rule 8): processes the newest barrier after its last
            if settle_only:
                return None
            if cursor is not None and head <= cursor:
                return quiet(())
            if cursor is not None and world.before_head is not None and world.before_head > cursor:
                first = self._after(cursor)
                assert first is not None
                # its sinks held their previous snapshots in between, if those were made without inputs too
                # (a job that lost its last source must not pair its old output with newer inputs) and still hold
                last = job.last_committed
                held = last is not None and not last.inputs and self._sinks_hold(job, last)
                reason = "skipped: the sinks changed since the job's last barrier"
                self._settle(job, first, world.before_head, cursor, never=not held, reason=reason)
                cursor = world.before_head
            return self._start(job, head, {}, cursor, ())

        skipped: list[int] = []
        frontier = self._inputs_frontier(sources)
        if cursor is None and sink_front is None:
            b = self._first_target(sources, frontier, start)
        else:
            assert cursor is not None
            b = self._after(cursor)
        for _ in range(MAX_STEPS):
            if b is None:
                return None if settle_only else quiet(skipped)
            if frontier is None or b > frontier:
                if self._settle_writers(sources, b):
                    frontier = self._inputs_frontier(sources)
                    continue
                if settle_only:
                    return None
                lagging = tuple(t.name for t in sources if (f := self._input_frontier(t)) is None or f < b)
                return Wait(b, lagging, tuple(skipped))
            states = {t.id: self._state(t, b) for t in sources}
            pending = [self.world.tables[t].name for t, st in states.items() if st.kind == "pending"]
            if pending:  # only when a frontier moved under us; answer what we know
                return None if settle_only else Wait(b, tuple(pending), tuple(skipped))
            end = min(st.through for st in states.values() if st.through is not None)
            never = sorted(self.world.tables[t].name for t, st in states.items() if st.kind == "never")
            if never:
                reason = f"skipped: input {', '.join(never)} does not complete barrier {b}"
                self._settle(job, b, end, cursor, never=True, reason=reason)
                skipped.append(b)
            elif self._unchanged(job, {self.world.tables[t].name: st.snapshot for t, st in states.items()}):
                self._settle(job, b, end, cursor, never=False, reason=None)
            else:
                if settle_only:
                    return None
                return self._start(job, b, states, cursor, skipped)
            cursor, b = end, self._after(end)
        return None if settle_only else Wait(b, (), tuple(skipped))

    def _first_target(self, sources: Sequence[TableView], frontier: int | None, start: str | int | None) -> int | None:
        """The first barrier of a job that never settled one and whose sinks have no history (`start`)."""
        if frontier is None:
            return self.world.head  # an input has no data yet: the walk answers wait
        if start in (None, "newest"):
            return frontier
        if start == "earliest":
            firsts = [t.first_complete for t in sources if t.first_complete is not None]
            return min(max(firsts), frontier) if firsts else frontier
        assert isinstance(start, int)
        at_or_after = self._after(start - 1) if start > 0 else None
        return frontier if at_or_after is None else min(at_or_after, frontier)

    # --- states -----------------------------------------------------------------------------------------------

    def _frontier(self, t: TableView) -> int | None:
        if t.newest is None:
            return None
        head = self.world.head
        return head if t.newest.last is None or (head is not None and t.newest.last > head) else t.newest.last

    def _input_frontier(self, t: TableView) -> int | None:
        """The newest barrier a reader of `t` can decide: the head for roots, else what its writer settled."""
        if t.newest is None:
            return self.world.head if t.writer_id is None else None  # a root without data is never, not pending
        return self._frontier(t)

    def _inputs_frontier(self, sources: Sequence[TableView]) -> int | None:
        values = [self._input_frontier(t) for t in sources]
        return None if any(v is None for v in values) else min(v for v in values if v is not None)

    def _state(self, t: TableView, b: int) -> _State:
        head = self.world.head
        if t.newest is None:
            return _State("never", through=head) if t.writer_id is None else _State("pending")
        frontier = self._frontier(t)
        assert frontier is not None
        if b > frontier:
            return _State("pending")
        if t.first_barrier is not None and b < t.first_barrier:
            assert t.before_first is not None
            return _State("never", through=t.before_first if head is None else min(t.before_first, head))
        found = t.covering(b)
        if found == "unknown":
            raise NeedRanges(t.id, b)
        if found is None:  # a hole in the history: the table never completes b
            return _State("never", through=b)
        # A view fetched after the plan's first gather may know ranges past the plan's head: the plan decides no
        # barrier after it (its head is the newest barrier of one consistent view).
        through = head if found.last is None or (head is not None and found.last > head) else found.last
        if found.snapshot is None:
            return _State("never", through=through, range=found)
        return _State("complete", found.snapshot, through=through, range=found)

    def _after(self, barrier: int) -> int | None:
        """The first barrier issued after `barrier` (None: it is the newest)."""
        world = self.world
        if world.head is None or barrier >= world.head:
            return None
        if barrier in world.after:
            return world.after[barrier]
        for t in world.tables.values():
            if t.newest is not None and t.newest.last == barrier and t.after_frontier is not None:
                return t.after_frontier
            if t.before_first == barrier and t.first_barrier is not None:
                return t.first_barrier
            following = t.next_range(barrier)
            if following is not None and barrier in {r.last for r in t.ranges.values()}:
                return following.first  # ranges of a table are contiguous
        if world.before_head == barrier:
            return world.head
        raise NeedAfter(barrier)

    # --- decisions ------------------------------------------------------------------------------------------------

    def _unchanged(self, job: JobView, snapshots: Mapping[str, int | None]) -> bool:
        """Rule 4: same inputs, same snapshots, same sinks holding the job's last committed output."""
        last = job.last_committed
        if last is None:
            return False
        before = {name: value.get("snapshot_id") for name, value in last.inputs.items()}
        return dict(snapshots) == before and self._sinks_hold(job, last)

    def _owes(self, job: JobView, sources: Sequence[TableView], cursor: int) -> bool:
        """Rule 5's other half: the job gave up (or was made to give up) the newest barrier, `cursor`, while its
        inputs there hold data its sinks do not reflect. That data is owed: a new barrier offers it, without
        waiting for new root data. An input that never completes `cursor` owes it first (its writer allocates)."""
        last = job.last_run
        if last is None or last.status != "aborted" or last.barrier != cursor:
            return False
        if not sources:
            return True  # an ingestion step gave its barrier up: its data is offered at a new one
        states = {t.id: self._state(t, cursor) for t in sources}
        if any(st.kind != "complete" for st in states.values()):
            return False
        return not self._unchanged(job, {self.world.tables[t].name: st.snapshot for t, st in states.items()})

    def _sinks_hold(self, job: JobView, last: RunView) -> bool:
        sinks = self._tables(job.sinks)
        if {s.name for s in sinks} != set(last.outputs):
            return False
        return all(s.last_output == (last.outputs[s.name], job.id) for s in sinks)

    def _settle_writers(self, sources: Sequence[TableView], barrier: int) -> bool:
        """Let writers of lagging inputs complete the barriers where their inputs did not change (PRODUCT.md:
        completion needs no work then). True when an input moved forward."""
        moved = False
        for t in sources:
            frontier = self._input_frontier(t)
            if t.writer_id is None or (frontier is not None and frontier >= barrier):
                continue
            if t.writer_id in self._visited:
                continue
            writer = self.world.jobs.get(t.writer_id)
            if writer is None:
                raise NeedJobs([t.writer_id])
            self._visited.add(writer.id)
            if not writer.active or writer.in_flight is not None or not writer.sources:
                continue  # busy, retired, or an ingestion step (only it knows whether it has new data)
            self._walk(writer, settle_only=True, start=None)
            moved = moved or self._input_frontier(t) != frontier
        return moved

    # --- writing ------------------------------------------------------------------------------------------------

    def _start(
        self, job: JobView, barrier: int, states: Mapping[int, _State], cursor: int | None, skipped: Sequence[int]
    ) -> Process:
        self._catch_up(job, cursor)
        last = job.last_committed
        before = last.inputs if last is not None else {}
        inputs: dict[str, Any] = {}
        run = NewRun(job.id, barrier, barrier, "in_flight", inputs, None)
        for table_id, st in states.items():
            name = self.world.tables[table_id].name
            assert st.snapshot is not None
            previous = before.get(name, {}).get("snapshot_id")
            inputs[name] = {"snapshot_id": st.snapshot, "previous_snapshot_id": previous}
            if st.range is not None and st.range.kind != "sealed":
                if st.range.id is None or st.range.id in self.writes.range_ends:
                    run.ready_now = True
                else:
                    run.ready_ranges.append(st.range.id)
        self._touch(job)
        self.writes.new_runs.append(run)
        job.in_flight = RunView(None, barrier, barrier, "in_flight", inputs, {}, None)
        return self._process_answer(job, job.in_flight, skipped)

    def _process_answer(self, job: JobView, run: RunView, skipped: Sequence[int]) -> Process:
        inputs = {
            name: InputAt(int(value["snapshot_id"]), value.get("previous_snapshot_id"))
            for name, value in sorted(run.inputs.items())
        }
        sinks = {s.name: (s.last_output[0] if s.last_output else None) for s in self._tables(job.sinks)}
        return Process(run.barrier, inputs, sinks, tuple(skipped))

    def _settle(
        self, job: JobView, first: int, last: int, cursor: int | None, *, never: bool, reason: str | None
    ) -> None:
        """Complete barriers first … last for the job's sinks without work: idle (the last committed output
        again) or never (skipped)."""
        self._catch_up(job, cursor)
        self._touch(job)
        committed = job.last_committed
        idle = not never and committed is not None
        for sink in self._tables(job.sinks):
            follows = sink.newest is not None and sink.newest.last == cursor
            if idle:
                assert committed is not None
                self._put(sink, job, first, last, int(committed.outputs[sink.name]), "idle", follows=follows)
            else:
                self._put(sink, job, first, last, None, "aborted", follows=follows)
        previous = job.last_run
        if idle and previous is not None and previous.status == "idle" and previous.barrier == job.last:
            if previous.id is not None:
                self.writes.run_ends[previous.id] = last
            else:
                self._new_run_of(previous).barrier = last
            previous.barrier = last
        else:
            self._add_run(job, first, last, "idle" if idle else "aborted", "inputs unchanged" if idle else reason)
        self._advance(job, last)

    def _catch_up(self, job: JobView, cursor: int | None) -> None:
        """Rule 3: barriers up to `cursor` were settled in a sink by another writer (or as a root): the job
        passes over them, and its other sinks never complete them (a gap)."""
        if cursor is None:
            return
        for sink in self._tables(job.sinks):
            frontier = self._frontier(sink)
            if frontier is not None and frontier < cursor:
                assert sink.after_frontier is not None
                self._touch(job)
                self._put(sink, job, sink.after_frontier, cursor, None, "gap", follows=False)
        if job.last is not None and job.last < cursor:
            assert job.after_last is not None
            self._touch(job)
            self._add_run(job, job.after_last, cursor, "aborted", "skipped: a sink was settled by another writer")
        if job.last is None or job.last < cursor:
            self._touch(job)
            self._advance(job, cursor)

    def _put(
        self, t: TableView, job: JobView, first: int, last: int, snapshot: int | None, kind: str, *, follows: bool
    ) -> None:
        """Make `t` hold `snapshot` (None: never) at first … last; when the newest range ends right before
        `first` (`follows`) with the same job and snapshot, it is extended instead (storage grows with
        snapshots, not barriers)."""
        newest = t.newest
        if (
            follows
            and newest is not None
            and newest.job_id == job.id
            and newest.snapshot == snapshot
            and (newest.kind in SETTLED_KINDS if snapshot is not None else newest.kind == kind)
        ):
            newest.last = last
            if newest.id is not None:
                self.writes.range_ends[newest.id] = last
        else:
            # Everything from the table's newest range on is now known: the database holds nothing after it, and
            # barriers between its end and `first` are a hole. Knowing only first … last made a later look-up of
            # such a barrier ask the database, which cannot know this plan's range: the plan asked forever.
            covers_from = first if newest is None else min(newest.first, first)
            newest = Range(None, t.id, first, last, snapshot, kind, job.id)
            self.writes.new_ranges.append(newest)
            t.ranges[first] = newest
            t.known.append((covers_from, last))
            t.newest = newest
            if t.first_barrier is None:
                t.first_barrier = first
        if snapshot is not None:
            t.last_output = (snapshot, job.id)
        t.after_frontier = None  # its newest range moved; `_after` learns from the inputs' ranges

    def _add_run(self, job: JobView, first: int, last: int, status: str, reason: str | None) -> None:
        run = NewRun(job.id, first, last, status, {}, reason)
        self.writes.new_runs.append(run)
        job.last_run = RunView(None, first, last, status, {}, {}, reason)

    def _new_run_of(self, view: RunView) -> NewRun:
        for run in reversed(self.writes.new_runs):
            if run.first == view.first and run.status == view.status:
                return run
        raise AssertionError("a run written by this plan is not in its writes")

    def _advance(self, job: JobView, barrier: int) -> None:
        job.last = barrier
        self.writes.job_lasts[job.id] = barrier

    def _touch(self, job: JobView) -> None:
        self.writes.expect.setdefault(job.id, job.version)

    def _tables(self, ids: Iterable[int]) -> list[TableView]:
        return [self.world.tables[i] for i in ids]


def _max(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None
