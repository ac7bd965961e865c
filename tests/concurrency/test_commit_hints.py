"""A commit planned on what its `next` stored (services/commit_hints.py) is the commit a fresh gather plans.

This test process is one server process (its own `Database`, calling the protocol's services), and the suite's
server is another, sharing the database. A seeded random walk over a changing lineage steps jobs here and changes
them there: reports of root snapshots, `next`, commits of new and unchanged outputs (an unchanged one extends the
sink's range, so the barrier after that range matters), aborts on either process, steps of the same job on the
other process, a sink added and removed, a table handed to another writer and back, a job retired and revived.

Before each commit here, the hint this process holds is compared with a fresh gather. When the job is still at the
version the hint expects, every view a commit reads must be the same and so must the planned writes, and the commit
must be the write alone (one statement). When the job changed, the commit must answer what the fresh state says
(after the held plan failed or its write stored nothing, a gather).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio
import httpx
import pytest

from metaservice.db import statements
from metaservice.db.database import Database
from metaservice.errors import MetaServiceError
from metaservice.repositories import protocol as protocol_rows
from metaservice.repositories.protocol import Gathered
from metaservice.runtime import Runtime
from metaservice.services import barriers
from metaservice.services.commit_hints import Hint
from metaservice.services.planner import Planner
from metaservice.settings import Settings

STEPS = 400
ROOTS = {"a": "lake.raw.r1", "b": "lake.raw.r2", "c": "lake.raw.r2"}  # the root each job reports
MID, MART, EXTRA = "lake.mid.m", "lake.mart.s", "lake.mid.x"


def _path(table: str) -> str:
    return table.replace(".", "/")


@dataclass
class Walk:
    api: httpx.Client
    db: Runtime
    rng: random.Random
    snapshots: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROOTS.values(), 0))
    in_flight: dict[str, int] = field(default_factory=dict)  # job → barrier handed out on this process
    mid_writer: str = "a"
    figures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("compared", "extends", "stale"), 0))
    log: list[str] = field(default_factory=list)

    def ok(self, response: httpx.Response) -> httpx.Response:
        assert response.status_code < 300, f"{response.request.method} {response.request.url}: {response.text}"
        return response

    async def next_here(self, job: str) -> None:
        roots: dict[str, int] = {}
        if job in ROOTS and self.rng.random() < 0.7:
            root = ROOTS[job]
            self.snapshots[root] += 1
            roots[root] = self.snapshots[root]
        try:
            decision = await barriers.next_barrier(self.db, job_id=job, root_snapshots=roots, min_interval=0.0)
        except MetaServiceError as error:  # retired, or a root handed to a writer meanwhile
            self.log.append(f"next {job} here: {type(error).__name__}")
            return
        self.log.append(f"next {job} here: {decision.action} {decision.barrier}")
        if decision.action == "process":
            assert decision.barrier is not None
            self.in_flight[job] = decision.barrier

    def new_outputs(self, g: Gathered) -> dict[str, int]:
        """Snapshots for the job's current sinks: a third of the time each keeps its newest (the range extends)."""
        assert g.job_id is not None
        chosen = {}
        for t in g.world.jobs[g.job_id].sinks:
            view = g.world.tables[t]
            newest = view.last_output[0] if view.last_output else 0
            chosen[view.name] = newest if self.rng.random() < 0.35 and view.last_output else newest + 1
        return chosen

    async def commit_here(self, job: str) -> None:
        barrier = self.in_flight.pop(job)
        hint = self.db.commit_hints.take(job, barrier)
        async with self.db.database.connection() as conn:
            fresh = await protocol_rows.gather(conn, name=job, barrier=barrier, windows=False)
        if fresh.job_id is None:
            return
        chosen = self.new_outputs(fresh)
        held_current = hint is not None and self.compare(hint, fresh, barrier, chosen)
        if hint is not None:
            self.db.commit_hints.keep(job, hint)  # back, for the commit below to use
        tally, token = statements.start()
        try:
            await barriers.commit_barrier(self.db, job_id=job, barrier=barrier, snapshots=chosen)
            answer = "committed"
        except MetaServiceError as error:
            answer = type(error).__name__
        finally:
            statements.stop(token)
        self.log.append(f"commit {job} {barrier} {chosen} here: {answer}, {tally.statements:g} statements")
        expected = _expected_answer(fresh, barrier, chosen)
        assert answer == expected, f"the fresh state says {expected}; {self.log[-12:]}"
        if held_current:
            assert tally.statements == 1, "a commit on a current hint is the write alone"
        elif hint is not None:  # planned on it: an error, or a write that stores nothing; then gathered
            self.figures["stale"] += 1
            assert tally.statements >= (2 if answer == "committed" else 1)

    def compare(self, hint: Hint, fresh: Gathered, barrier: int, chosen: Mapping[str, int]) -> bool:
        """True when the job is at the version the hint expects; then every view a commit reads and the planned
        writes must equal the fresh gather's."""
        held = hint.gathered()
        assert fresh.job_id is not None and held.job_id is not None
        job, now = held.world.jobs[held.job_id], fresh.world.jobs[fresh.job_id]
        if (held.job_id, job.version) != (fresh.job_id, now.version):
            assert (held.job_id, job.version) < (fresh.job_id, now.version), "a hint never expects a newer job"
            return False
        self.figures["compared"] += 1
        assert (job.name, job.sinks) == (now.name, now.sinks)
        assert held.run_at == fresh.run_at, f"held {held.run_at}, fresh {fresh.run_at}"
        for t in job.sinks:
            mine, theirs = held.world.tables[t], fresh.world.tables[t]
            seen = (mine.name, mine.newest, mine.last_output, mine.after_frontier)
            assert seen == (theirs.name, theirs.newest, theirs.last_output, theirs.after_frontier), t
        if fresh.run_at is not None and fresh.run_at.status == "in_flight" and fresh.run_at.first == barrier:
            plans = []
            for g in (held, fresh):
                planner = Planner(g.world)
                assert g.run_at is not None
                planner.commit(g.job_id, barrier, chosen, g.run_at)  # type: ignore[arg-type]
                plans.append(planner.writes)
            assert plans[0] == plans[1]
            self.figures["extends"] += bool(plans[0].range_ends)
        return True

    async def step(self) -> None:
        job = self.rng.choice(("a", "b", "c"))
        roll = self.rng.random()
        if roll < 0.06:
            self.change_lineage()
        elif roll < 0.14:
            self.there(job)
        elif job in self.in_flight and roll < 0.22:
            barrier = self.in_flight[job]
            self.api.post(f"/jobs/{job}/barriers/{barrier}/abort", json={"reason": "the other process"})
            self.log.append(f"abort {job} {barrier} there")  # and commit it here: the hint is stale
        elif job in self.in_flight:
            await self.commit_here(job)
        else:
            await self.next_here(job)

    def there(self, job: str) -> None:
        """The job steps on the other process: its `next` (and a commit of what it hands out)."""
        decision = self.api.post(f"/jobs/{job}/barriers/next", json={})
        if decision.status_code != 200 or decision.json()["action"] != "process":
            return
        barrier = int(decision.json()["barrier"])
        sinks = {name: (s["previous_snapshot_id"] or 0) + 1 for name, s in decision.json()["sinks"].items()}
        response = self.api.post(f"/jobs/{job}/barriers/{barrier}/commit", json={"snapshots": sinks})
        self.log.append(f"next + commit {job} {barrier} there: {response.status_code}")

    def change_lineage(self) -> None:
        choice = self.rng.randrange(5)
        if choice == 0:
            response = self.api.post(f"/register/sink/a/{_path(EXTRA)}")
        elif choice == 1:
            response = self.api.delete(f"/register/sink/a/{_path(EXTRA)}")
        elif choice == 2:  # hand m to c, or back to a
            holder, other = ("a", "c") if self.mid_writer == "a" else ("c", "a")
            self.ok(self.api.delete(f"/register/sink/{holder}/{_path(MID)}"))
            response = self.ok(self.api.post(f"/register/sink/{other}/{_path(MID)}"))
            self.mid_writer = other
        elif choice == 3:
            response = self.api.post("/unregister/c")
        else:  # revive c (reading the second root)
            response = self.api.post(f"/register/source/c/{_path(ROOTS['b'])}")
        self.log.append(f"lineage change {choice} there: {response.status_code}")


def _expected_answer(fresh: Gathered, barrier: int, chosen: Mapping[str, int]) -> str:
    """What the commit must answer, by the state a fresh gather holds (the walk keeps snapshots from regressing)."""
    run = fresh.run_at
    if run is None or run.first != barrier or run.status in ("idle", "aborted"):
        return "NotInFlight"
    if run.status == "committed":  # by the other process: a repeat, or other snapshots
        return "committed" if dict(run.outputs) == dict(chosen) else "SnapshotConflict"
    return "committed"


@pytest.mark.timeout(300)
def test_a_commit_on_the_state_its_next_stored_is_the_commit_a_fresh_gather_plans(
    api: httpx.Client, database_url: str
) -> None:
    for path in (
        f"/register/source/a/{_path(ROOTS['a'])}",
        f"/register/sink/a/{_path(MID)}",
        f"/register/source/b/{_path(MID)}",
        f"/register/source/b/{_path(ROOTS['b'])}",
        f"/register/sink/b/{_path(MART)}",
        f"/register/source/c/{_path(ROOTS['b'])}",
    ):
        assert api.post(path).status_code == 201, path
    seed = random.SystemRandom().randrange(2**32)

    async def main() -> dict[str, int]:
        db = Database(Settings(database_url=database_url))
        await db.open()
        runtime = Runtime(db)
        walk = Walk(api, runtime, random.Random(seed))
        try:
            for _ in range(STEPS):
                await walk.step()
        except AssertionError as error:
            raise AssertionError(f"seed {seed}: {error}\n" + "\n".join(walk.log[-40:])) from error
        finally:
            await runtime.close()
            await db.close()
        return walk.figures

    figures = anyio.run(main)
    print(seed, figures)
    assert figures["compared"] >= 40 and figures["extends"] >= 5 and figures["stale"] >= 5, (seed, figures)
