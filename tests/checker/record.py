"""What the concurrent checker saw, and the checks it runs on it once the run is over.

Every request is recorded with its wall-clock interval (monotonic start and end) and the server process that
answered it. Nothing is checked while the run goes on, because answers race their own records: a job may be
handed a snapshot whose commit has not been answered to its writer yet. After the run:

- **Produced together.** A snapshot's provenance is the set of root snapshots it was built from, transitively (a
  root snapshot is its own; a job's output is built from the inputs it was handed). Every set of inputs handed to
  a job, and every read set, must agree on every root: one snapshot per root.
- **One value per (table, barrier)**, across every read and every set of inputs handed out, except across a
  completed rollback of that table.
- **Strong never goes back** for one set of tables (answers ordered by real time: one ended before the other
  began), except across a completed rollback.
- **Deterministic replay.** A job that walked away from a barrier (a crash) is handed the same barrier with the
  same inputs again, unless a lineage change or a rollback touched the job meanwhile.
- **Acknowledged commits** are in the job's history as read through the other server process.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Interval = tuple[float, float]


@dataclass(frozen=True)
class Handed:
    """A `process` answer: `job` was handed `barrier` with `inputs` (table → snapshot)."""

    job: str
    barrier: int
    inputs: Mapping[str, int]
    start: float
    end: float
    server: int


@dataclass(frozen=True)
class Outcome:
    """What became of a barrier a job was handed: `committed` (acknowledged), `unknown` (no answer: maybe
    committed), `aborted`, `refused` (409: a change or a rollback aborted it first), or `crashed` (walked away)."""

    job: str
    barrier: int
    kind: str
    outputs: Mapping[str, int]
    start: float
    end: float
    server: int


@dataclass(frozen=True)
class Read:
    tables: tuple[str, ...]
    consistency: str
    barrier: int | None  # None: no consistent version (404) or not fresh enough
    versions: Mapping[str, int]
    start: float
    end: float
    server: int


@dataclass(frozen=True)
class Change:
    """A lineage change or a completed rollback touching `jobs` (and, for a rollback, `tables` after `barrier`)."""

    kind: str
    jobs: frozenset[str]
    tables: frozenset[str]
    start: float
    end: float
    barrier: int | None = None


@dataclass(frozen=True)
class RefusedRepeat:
    """A commit acknowledged, then repeated at once through the other server and refused `not_in_flight`."""

    job: str
    barrier: int
    start: float  # the first commit was sent
    end: float  # the repeat was answered
    what: str


@dataclass
class Record:
    """Thread-safe log of the run."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    handed: list[Handed] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    built_from: dict[tuple[str, int], Mapping[str, int]] = field(default_factory=dict)  # output → inputs
    roots: set[tuple[str, int]] = field(default_factory=set)  # reported root snapshots
    statuses: Counter[str] = field(default_factory=Counter)  # "POST /x → 409 code"
    server_errors: list[str] = field(default_factory=list)  # answers no request may get (500, ...)
    violations: list[str] = field(default_factory=list)
    refused_repeats: list[RefusedRepeat] = field(default_factory=list)

    def add(self, item: Handed | Outcome | Read | Change) -> None:
        with self.lock:
            if isinstance(item, Handed):
                self.handed.append(item)
            elif isinstance(item, Outcome):
                self.outcomes.append(item)
            elif isinstance(item, Read):
                self.reads.append(item)
            else:
                self.changes.append(item)

    def refused_repeat(self, repeat: RefusedRepeat) -> None:
        with self.lock:
            self.refused_repeats.append(repeat)

    def wrote(self, outputs: Mapping[str, int], inputs: Mapping[str, int]) -> None:
        with self.lock:
            for table, snapshot in outputs.items():
                self.built_from[(table, snapshot)] = dict(inputs)

    def reported(self, table: str, snapshot: int) -> None:
        with self.lock:
            self.roots.add((table, snapshot))

    def answered(self, what: str, status: int, code: str | None, detail: str) -> None:
        with self.lock:
            self.statuses[f"{what} → {status}{' ' + code if code else ''}"] += 1
            if status >= 500 and status not in (503, 504):
                self.server_errors.append(f"{what} → {status}: {detail[:300]}")

    # --- the checks -------------------------------------------------------------------------------------------

    def check(self) -> list[str]:
        """Every violation of the module docstring's properties (empty: none)."""
        problems = [f"a server answered {e}" for e in self.server_errors]
        problems += self._produced_together()
        problems += self._one_value_per_table_and_barrier()
        problems += self._strong_never_goes_back()
        problems += self._replays()
        problems += self._repeats_refused_only_after_rollbacks()
        return problems + self.violations

    def _repeats_refused_only_after_rollbacks(self) -> list[str]:
        """A repeated commit answers as the first did, unless a rollback of the job to an earlier barrier
        completed between the two: then the barrier was undone, and `not_in_flight` is the truth."""
        rollbacks = [c for c in self.changes if c.kind == "rollback"]
        return [
            repeat.what
            for repeat in self.refused_repeats
            if not any(
                repeat.job in c.jobs
                and c.barrier is not None
                and c.barrier < repeat.barrier
                and c.end > repeat.start
                and c.start < repeat.end
                for c in rollbacks
            )
        ]

    def provenance(
        self, table: str, snapshot: int, seen: frozenset[tuple[str, int]] = frozenset()
    ) -> dict[str, set[int]]:
        """Root → the snapshots of it `table`=`snapshot` was built from (more than one: never produced together)."""
        key = (table, snapshot)
        inputs = self.built_from.get(key)
        if inputs is None or key in seen:
            return {table: {snapshot}} if key in self.roots else {f"?{table}": {snapshot}}
        merged: dict[str, set[int]] = defaultdict(set)
        for t, s in inputs.items():
            for root, values in self.provenance(t, s, seen | {key}).items():
                merged[root] |= values
        return dict(merged)

    def _mixed(self, snapshots: Mapping[str, int]) -> list[str]:
        merged: dict[str, set[int]] = defaultdict(set)
        for table, snapshot in snapshots.items():
            for root, values in self.provenance(table, snapshot).items():
                merged[root] |= values
        unknown = sorted(r[1:] for r in merged if r.startswith("?"))
        mixed = {r: sorted(v) for r, v in merged.items() if not r.startswith("?") and len(v) > 1}
        out = [f"{t} holds a snapshot nobody reported or committed" for t in unknown]
        out += [f"built from {root} at snapshots {values}" for root, values in sorted(mixed.items())]
        return out

    def _produced_together(self) -> list[str]:
        problems = []
        for h in self.handed:
            for why in self._mixed(h.inputs):
                problems.append(
                    f"{h.job} was handed {h.barrier} with inputs {dict(h.inputs)} never produced together: {why}"
                )
        for r in self.reads:
            if r.barrier is not None:
                for why in self._mixed(r.versions):
                    problems.append(
                        f"{r.consistency} read of {list(r.tables)} on server {r.server} answered {r.barrier} "
                        f"{dict(r.versions)}, never produced together: {why}"
                    )
        return problems

    def _rolled_back(self, table: str) -> list[Change]:
        return [c for c in self.changes if c.kind == "rollback" and table in c.tables]

    def _epoch(self, rollbacks: Sequence[Change], start: float, end: float) -> int | None:
        """How many of `rollbacks` completed before [start, end]; None when one overlaps it."""
        if any(c.start < end and start < c.end for c in rollbacks):
            return None
        return sum(1 for c in rollbacks if c.end <= start)

    def _one_value_per_table_and_barrier(self) -> list[str]:
        seen: dict[tuple[str, int, int], tuple[int, str]] = {}
        problems = []
        observations: list[tuple[str, int, int, float, float, str]] = []
        for h in self.handed:
            observations += [(t, h.barrier, s, h.start, h.end, f"{h.job}'s inputs") for t, s in h.inputs.items()]
        for r in self.reads:
            if r.barrier is not None:
                observations += [
                    (t, r.barrier, s, r.start, r.end, f"a {r.consistency} read") for t, s in r.versions.items()
                ]
        rollbacks = {t: self._rolled_back(t) for t in {o[0] for o in observations}}
        for table, barrier, snapshot, start, end, what in observations:
            epoch = self._epoch(rollbacks[table], start, end)
            if epoch is None:
                continue
            key = (table, barrier, epoch)
            if key in seen and seen[key][0] != snapshot:
                problems.append(
                    f"{table} at barrier {barrier} is {seen[key][0]} in {seen[key][1]} but {snapshot} in {what}"
                )
            seen.setdefault(key, (snapshot, what))
        return problems

    def _strong_never_goes_back(self) -> list[str]:
        by_set: dict[tuple[str, ...], list[Read]] = defaultdict(list)
        for r in self.reads:
            if r.consistency == "strong":
                by_set[r.tables].append(r)
        rollbacks = [c for c in self.changes if c.kind == "rollback"]
        problems = []
        for tables, reads in by_set.items():
            reads.sort(key=lambda r: r.start)
            best: Read | None = None  # the highest answer among reads that ended before this one began
            ended = sorted(reads, key=lambda r: r.end)
            i = 0
            for r in reads:
                while i < len(ended) and ended[i].end < r.start:
                    e = ended[i]
                    if e.barrier is not None and (best is None or best.barrier is None or e.barrier > best.barrier):
                        best = e
                    i += 1
                if best is None or best.barrier is None:
                    continue
                if any(best.start < c.end and c.start < r.end for c in rollbacks):
                    continue  # a rollback completed in between: the one way back
                if r.barrier is None or r.barrier < best.barrier:
                    problems.append(
                        f"strong read of {list(tables)} went back: {best.barrier} (server {best.server}) then "
                        f"{r.barrier} (server {r.server})"
                    )
        return problems

    def _replays(self) -> list[str]:
        events: dict[str, list[Handed | Outcome]] = defaultdict(list)
        for h in self.handed:
            events[h.job].append(h)
        for o in self.outcomes:
            events[o.job].append(o)
        problems = []
        for job, items in events.items():
            items.sort(key=lambda e: (e.start, 0 if isinstance(e, Handed) else 1))
            previous: Handed | None = None
            for item in items:
                if isinstance(item, Outcome):
                    previous = None if item.kind != "crashed" else previous
                    continue
                if previous is not None and (previous.barrier, dict(previous.inputs)) != (
                    item.barrier,
                    dict(item.inputs),
                ):
                    touched = any(job in c.jobs and c.start < item.end and previous.start < c.end for c in self.changes)
                    if not touched:
                        problems.append(
                            f"{job} walked away from {previous.barrier} {dict(previous.inputs)} and, with no change "
                            f"of its lineage, was handed {item.barrier} {dict(item.inputs)}"
                        )
                previous = item
        return problems


def merged_counts(counters: Iterable[Counter[str]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for c in counters:
        total.update(c)
    return total
