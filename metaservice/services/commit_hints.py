"""What a `next` that hands out a barrier leaves for the job's commit, so that the commit needs no gather.

A job commits the barrier its `next` just handed out, most often on the same server process. Gathering the job's
state again for that commit reads what the `next` itself wrote a moment before. So the process keeps it: the job,
its sinks and its run in flight, as the stored plan's world holds them (`protocol.apply` fills in the ids of the
rows it inserted). The commit plans on a copy with the same planner and writes with the same compare-and-set,
expecting the version the `next` left the job at. A commit is then one statement instead of two.

Why that is safe: everything a commit's plan reads either changes only together with the job's version (its runs,
its sinks' ranges and newest outputs, its lineage, its registration: every writer of those bumps the version, as
the compare-and-set between a gather and its write already relies on), or never changes once seen (the barrier
issued after a sink's newest range: barriers are issued in order and never removed). So the write either stores
exactly what a fresh gather would have led to, or stores nothing, and then the commit gathers and plans as it
always did. Answers other than success are never decided on held state: a hint that does not plan a clean commit
is dropped and the commit gathers (docs/design.md, "A commit planned from its `next`").
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from metaservice.domain.world import RunView, World
from metaservice.repositories.protocol import Gathered
from metaservice.services.planner import NeedAfter, Planner

HINTS_KEPT = 4096  # jobs per process; the oldest hint goes first (a job that never commits costs nothing more)


@dataclass(frozen=True)
class Hint:
    """The state a commit of `run` reads, as the `next` that handed the run out stored it."""

    world: World  # the job (at the version that `next` left it) and its sinks, nothing else
    job_id: int
    run: RunView

    def gathered(self) -> Gathered:
        """A copy to plan on, shaped as `protocol.gather` answers."""
        return Gathered(self.world.clone(), self.job_id, replace(self.run), stale=False)


def after_next(planner: Planner, job_id: int) -> Hint | None:
    """The hint a stored `next` plan leaves for the job's commit; None when its world does not hold everything a
    commit reads (a row without its id, a sink whose following barrier it does not know)."""
    world, writes = planner.world, planner.writes
    job = world.jobs[job_id]
    run = job.in_flight
    if run is None:
        return None
    run_id = run.id
    if run_id is None:  # handed out by this plan: the stored row's id
        new = [r for r in writes.new_runs if r.job_id == job_id and r.first == run.first and r.status == "in_flight"]
        run_id = new[0].id if len(new) == 1 else None
    if run_id is None:
        return None
    follows: dict[int, int] = {}
    for sink_id in job.sinks:
        newest = world.tables[sink_id].newest
        if newest is None:
            continue
        if newest.id is None or newest.last is None:
            return None
        try:
            after = planner.barrier_after(newest.last)
        except NeedAfter:
            return None
        if after is None:
            return None
        follows[sink_id] = after
    held = World(world.head, world.before_head, {job_id: job}, {t: world.tables[t] for t in job.sinks}).clone()
    held_job = held.jobs[job_id]
    held_job.version = writes.expect[job_id] + 1 if job_id in writes.expect else job.version  # the write bumped it
    held_job.in_flight = replace(run, id=run_id)
    for sink_id, after in follows.items():
        held.tables[sink_id].after_frontier = after
    return Hint(held, job_id, held_job.in_flight)


class CommitHints:
    """The hints of one server process, by job name (a bounded map; the event loop is their only user)."""

    def __init__(self, size: int = HINTS_KEPT) -> None:
        self._size = size
        self._hints: OrderedDict[str, Hint] = OrderedDict()

    def keep(self, name: str, hint: Hint | None) -> None:
        """Remember `hint` for the job's commit (None: forget what was held for it)."""
        self._hints.pop(name, None)
        if hint is None:
            return
        self._hints[name] = hint
        while len(self._hints) > self._size:
            self._hints.popitem(last=False)

    def take(self, name: str, barrier: int) -> Hint | None:
        """The hint for committing `barrier` of the job, used once; a hint for another barrier is dropped."""
        hint = self._hints.pop(name, None)
        return hint if hint is not None and hint.run.first == barrier else None

    def __len__(self) -> int:
        return len(self._hints)
