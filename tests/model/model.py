"""The walk's pure-Python record: the lineage as registered, and which input snapshots built each snapshot.

It does not plan barriers: it never predicts which barrier a job gets or whether it idles. It knows only what
the walk did and what the server answered, and checks the answers against properties every correct planner has:

- **Produced together.** Each snapshot's *provenance* is the snapshot of every table it was built from,
  transitively, itself included (a reported root snapshot is its own origin; a committed one is built from the
  inputs its job was handed). A set of snapshots is produced together when their provenances agree on every
  table they share, and when every table of the set that is *settled upstream* of another at the answered barrier
  b is in that other's provenance: upstream through edges registered before b and present ever since (rule 1: a
  change takes effect at the first barrier issued after it), so the answer could not have been built without it.
- **Strong never goes back** for a given set of tables, except after a completed rollback.
- **Registry rules** (PRODUCT.md guarantee 1): one writer per table, no cycles, idempotent edges.
- **Blocked tables** for liveness: a table without a writer and without a snapshot reported since it lost its
  writer (an orphan, rule 2, or a root that never had data) and every table whose writer reads a blocked one.
  Those and their readers may wait; everything else must reach the newest barrier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["source", "sink"]
Provenance = dict[str, int]  # table → snapshot it was built from (transitively), the table itself included


@dataclass
class InFlight:
    """A barrier handed to a job and neither committed nor aborted (the job "crashed")."""

    barrier: int
    inputs: dict[str, int]
    offered: tuple[int, Any]  # (barrier, inputs) exactly as `next` answered: a replay must answer the same


@dataclass
class Model:
    """What the walk knows about the server's state, from its own calls and their answers."""

    sources: dict[str, dict[str, int]] = field(default_factory=dict)  # job → {table: head when the edge was added}
    sinks: dict[str, dict[str, int]] = field(default_factory=dict)
    jobs: set[str] = field(default_factory=set)  # every job the server knows (active or not)
    active: set[str] = field(default_factory=set)
    tables: set[str] = field(default_factory=set)
    provenance: dict[tuple[str, int], Provenance] = field(default_factory=dict)
    reported: dict[str, int] = field(default_factory=dict)  # writer-less tables: snapshot reported since the writer
    job_outputs: set[tuple[str, int]] = field(default_factory=set)  # snapshots a job committed
    newest_id: dict[str, int] = field(default_factory=dict)  # highest snapshot id used per table
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    aborted_by_change: dict[str, int] = field(default_factory=dict)  # job → barrier its lineage change aborted
    last_read: dict[str, dict[str, int] | None] = field(default_factory=dict)  # job → inputs of its last commit
    strongest: dict[frozenset[str], int] = field(default_factory=dict)
    head: int = 0  # newest barrier issued (0: none yet)

    # --- lineage -------------------------------------------------------------------------------------------------

    def writer(self, table: str) -> str | None:
        return next((job for job, sinks in self.sinks.items() if table in sinks), None)

    def role_of(self, job: str, table: str) -> Role | None:
        if table in self.sources.get(job, {}):
            return "source"
        return "sink" if table in self.sinks.get(job, {}) else None

    def expected_registration(self, job: str, table: str, role: Role) -> set[int | str]:
        """The one outcome the registry rules allow: 200 again, 201 new, 409 `table_has_writer` or `cycle`."""
        existing = self.role_of(job, table)
        if existing == role:
            return {200}
        if existing is not None:
            return {"cycle"}  # a job never reads and writes one table
        if role == "sink":
            writer = self.writer(table)
            if writer is not None:
                return {"table_has_writer"}
            return {"cycle"} if self._reaches(table, job) else {201}
        return {"cycle"} if self._reaches(job, table) else {201}

    def _reaches(self, start: str, target: str) -> bool:
        """Whether a downstream path leads from node `start` to node `target` (jobs and tables share one name
        space here: the walk's job and table names never collide)."""
        seen, frontier = {start}, [start]
        while frontier:
            node = frontier.pop()
            following = (
                list(self.sinks.get(node, {}))
                if node in self.jobs
                else [job for job, sources in self.sources.items() if node in sources]
            )
            for after in following:
                if after == target:
                    return True
                if after not in seen:
                    seen.add(after)
                    frontier.append(after)
        return False

    def add_edge(self, job: str, table: str, role: Role) -> None:
        self.known(job)
        self.tables.add(table)
        (self.sources if role == "source" else self.sinks).setdefault(job, {})[table] = self.head
        if role == "sink":
            self.reported.pop(table, None)  # a table with a writer is no root
        self.lineage_changed(job)

    def remove_edge(self, job: str, table: str, role: Role) -> None:
        (self.sources if role == "source" else self.sinks).get(job, {}).pop(table, None)
        self.lineage_changed(job)

    def unregister(self, job: str) -> None:
        self.sources.pop(job, None)
        self.sinks.pop(job, None)
        self.active.discard(job)
        self.lineage_changed(job)

    def lineage_changed(self, job: str) -> None:
        """Rule 7: a change of the job's edges aborts its barrier in flight."""
        run = self.in_flight.pop(job, None)
        if run is not None:
            self.aborted_by_change[job] = run.barrier

    def known(self, job: str) -> None:
        """The job took part in a registration that succeeded: it exists and is active."""
        self.jobs.add(job)
        self.active.add(job)
        self.last_read.setdefault(job, {})

    # --- snapshots -----------------------------------------------------------------------------------------------

    def fresh_id(self, table: str) -> int:
        return self.newest_id.get(table, 0) + 1

    def reported_snapshot(self, table: str, snapshot_id: int) -> None:
        self.provenance[(table, snapshot_id)] = {table: snapshot_id}
        self.reported[table] = snapshot_id
        self.newest_id[table] = max(self.newest_id.get(table, 0), snapshot_id)

    def committed(self, job: str, inputs: Mapping[str, int], outputs: Mapping[str, int]) -> None:
        built: Provenance = {}
        for table, snapshot_id in inputs.items():
            built.update(self.provenance[(table, snapshot_id)])
        for table, snapshot_id in outputs.items():
            self.provenance[(table, snapshot_id)] = {**built, table: snapshot_id}
            self.job_outputs.add((table, snapshot_id))
            self.newest_id[table] = max(self.newest_id.get(table, 0), snapshot_id)
        self.in_flight.pop(job, None)
        self.last_read[job] = dict(inputs)

    def root_snapshots(self, job: str) -> dict[str, int]:
        """What a job reports in `next`: the newest snapshot reported for each of its sources without a writer."""
        return {t: self.reported[t] for t in self.sources.get(job, {}) if t in self.reported and not self.writer(t)}

    # --- checks --------------------------------------------------------------------------------------------------

    def not_produced_together(self, barrier: int, snapshots: Mapping[str, int]) -> list[str]:
        """Why `snapshots` (answered for `barrier`) were never produced together; empty when they were."""
        problems = [
            f"{t}={s} is no snapshot the walk ever reported or committed"
            for t, s in snapshots.items()
            if (t, s) not in self.provenance
        ]
        if problems:
            return problems
        built = {t: self.provenance[(t, s)] for t, s in snapshots.items()}
        names = sorted(snapshots)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                for common in sorted(built[a].keys() & built[b].keys()):
                    if built[a][common] == built[b][common]:
                        continue
                    if common in (a, b):
                        built_one, other = (a, b) if common == b else (b, a)
                        problems.append(
                            f"{built_one}={snapshots[built_one]} was built from {other}={built[built_one][other]}, "
                            f"not from {other}={snapshots[other]}"
                        )
                    else:
                        problems.append(
                            f"{a}={snapshots[a]} was built from {common}={built[a][common]} but "
                            f"{b}={snapshots[b]} from {common}={built[b][common]}"
                        )
        for table in names:
            for upstream in sorted(self.settled_upstream(table, barrier) & set(names)):
                if upstream not in built[table]:
                    problems.append(
                        f"{upstream} is upstream of {table} at barrier {barrier} (through edges registered before "
                        f"it), yet {table}={snapshots[table]} was built without {upstream}"
                    )
        return problems

    def settled_upstream(self, table: str, barrier: int) -> set[str]:
        """Tables upstream of `table` through edges added before `barrier` was issued and present since."""
        found: set[str] = set()
        frontier = [table]
        while frontier:
            current = frontier.pop()
            for job, sinks in self.sinks.items():
                if sinks.get(current, barrier) >= barrier:
                    continue
                for source, added in self.sources.get(job, {}).items():
                    if added < barrier and source not in found:
                        found.add(source)
                        frontier.append(source)
        return found

    def strong_went_back(self, tables: Iterable[str], barrier: int | None) -> str | None:
        """Record one strong answer (None: 404); say how it went back, if it did."""
        key = frozenset(tables)
        best = self.strongest.get(key)
        if best is not None and (barrier is None or barrier < best):
            answered = "nothing" if barrier is None else f"barrier {barrier}"
            return f"strong {sorted(key)} answered {answered} after barrier {best}"
        if barrier is not None:
            self.strongest[key] = barrier
        return None

    def rolled_back(self, tables: Mapping[str, int], jobs: Iterable[str]) -> None:
        """A completed rollback: strong may go back; restored roots hold their restore snapshot, unless it is a
        job's output (the table had a writer at the barrier, which left since): then it is an orphan again
        (rule 2); the affected jobs' runs after the barrier are forgotten (their in-flight and last read are no
        longer known)."""
        self.strongest.clear()
        for table, restore in tables.items():
            if table in self.reported:
                if (table, restore) in self.job_outputs:
                    del self.reported[table]
                else:
                    self.reported[table] = restore
        for job in jobs:
            self.in_flight.pop(job, None)
            self.aborted_by_change.pop(job, None)
            self.last_read[job] = None

    def blocked(self) -> set[str]:
        """Tables that may legitimately lag the newest barrier: orphans and data-less roots, and what they feed."""
        blocked = {t for t in self.tables if self.writer(t) is None and t not in self.reported}
        changed = True
        while changed:
            changed = False
            for job in self.active:
                if set(self.sources.get(job, {})) & blocked:
                    fresh = set(self.sinks.get(job, {})) - blocked
                    blocked |= fresh
                    changed = changed or bool(fresh)
        return blocked
