"""A seeded random walk over a small universe of jobs and tables against the real server (issue 12, "Proof").

Each step is one action a user of MetaService can take: register a source or a sink, remove one edge,
unregister a job, report a root snapshot, issue a barrier, run a job (`next`, then commit, abort or "crash":
walk away and let a later `next` replay the barrier), commit a barrier a lineage change aborted, and plan and
complete a rollback. Every answer is checked against `Model` (tests/model/model.py), then a few consistent reads
of random tables are checked: each must be a set produced together, and strong never goes back. Every
`drain_every` steps and at the end, a drain checks liveness: with no new data, `next`/commit for every job must
bring each job to `idle` and each table to the newest barrier, except orphans and what reads from them.

The walk's choices depend only on the seed and on the answers, so a seed replays a failure against the same
server code.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tests.model.model import InFlight, Model, Role
from tests.model.wire import Answer, ContractBroken, Wire
from tests.support import table_path

WEIGHTS: Mapping[str, int] = {
    "register_source": 12,
    "register_sink": 9,
    "remove_edge": 8,
    "unregister": 2,
    "report": 14,
    "issue": 8,
    "run": 38,
    "late_commit": 3,
    "rollback": 3,
}
FOLLOW_UPS: Mapping[str, int] = {"commit": 65, "abort": 15, "crash": 20}
READS_PER_STEP = 3
ROOTS = 2  # the first tables of the universe rarely get a writer, so data keeps coming in
# A job processes each barrier once: a returning writer may process every barrier since its table's history
# ended, so only a barrier handed again after its commit, or more barriers than a soak issues, is a livelock.
MAX_BARRIERS_PER_DRAIN = 20_000
DRAIN_ROUNDS = 20  # rounds over every job until nothing changes; a `next` settles a bounded number of barriers


@dataclass
class Figures:
    """What a walk did, for the figures `make soak` prints."""

    seed: int
    steps: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    reads_checked: int = 0
    consistent_sets: int = 0
    strong_answers: int = 0
    drains: int = 0
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    def summary(self, wire: Wire) -> str:
        wall = (self.finished or time.monotonic()) - self.started
        actions = ", ".join(f"{kind} {n}" for kind, n in self.actions.most_common())
        outcomes = "\n".join(f"    {n:>6}  {outcome}" for outcome, n in sorted(wire.outcomes.items()))
        return (
            f"model walk: seed {self.seed}, {self.steps} steps in {wall:.1f} s ({self.steps / wall:.1f} steps/s),"
            f" {self.drains} liveness drains\n"
            f"  actions: {actions}\n"
            f"  reads checked: {self.reads_checked} ({self.consistent_sets} answered a set, all produced together);"
            f" strong answers: {self.strong_answers}\n"
            f"  requests: {sum(wire.outcomes.values())}, by outcome:\n{outcomes}"
        )


class Walk:
    """One seeded walk; `run` raises `ContractBroken` at the first answer the model rejects."""

    def __init__(
        self,
        wire: Wire,
        *,
        seed: int,
        tables: int = 6,
        jobs: int = 4,
        drain_every: int = 50,
        weights: Mapping[str, int] = WEIGHTS,
        follow_ups: Mapping[str, int] = FOLLOW_UPS,
    ) -> None:
        self.wire, self.rng, self.drain_every, self.weights = wire, random.Random(seed), drain_every, dict(weights)
        self.follow_ups = dict(follow_ups)
        self.table_names = [f"lake.m.t{i}" for i in range(tables)]
        self.job_names = [f"j{i}" for i in range(jobs)]
        self.model = Model()
        self.figures = Figures(seed=seed)
        self.log: list[str] = []
        self.step = 0

    def run(self, steps: int) -> Figures:
        kinds, weights = list(self.weights), list(self.weights.values())
        try:
            for self.step in range(steps):
                kind = self.rng.choices(kinds, weights)[0]
                self.figures.actions[kind] += 1
                getattr(self, f"_{kind}")()
                self._check_reads()
                self.figures.steps += 1
                if self.drain_every and (self.step + 1) % self.drain_every == 0:
                    self._drain()
            self.step = steps
            self._drain()
        except ContractBroken as broken:
            raise ContractBroken(f"step {self.step}: {broken}") from broken
        self.figures.finished = time.monotonic()
        return self.figures

    # --- actions -------------------------------------------------------------------------------------------------

    def _register_source(self) -> None:
        self._register("source")

    def _register_sink(self) -> None:
        self._register("sink")

    def _register(self, role: Role) -> None:
        job, table = self.rng.choice(self.job_names), self.rng.choice(self.table_names)
        if role == "sink" and table in self.table_names[:ROOTS] and self.rng.random() < 0.85:
            table = self.rng.choice(self.table_names[ROOTS:])  # keep a few roots that feed data, mostly
        expected = self.model.expected_registration(job, table, role)
        self._refresh_head()
        answer = self.wire.post(f"/register/{role}/{job}/{table_path(table)}", expect=expected)
        self._note(f"register {role} {job} {table} → {answer.outcome()}")
        if answer.status == 201:
            self.model.add_edge(job, table, role)

    def _remove_edge(self) -> None:
        edges: list[tuple[str, str, Role]] = [(j, t, "source") for j, ts in self.model.sources.items() for t in ts]
        edges += [(j, t, "sink") for j, ts in self.model.sinks.items() for t in ts]
        role: Role
        if edges and self.rng.random() < 0.7:
            job, table, role = self.rng.choice(sorted(edges))
        else:
            job, table = self.rng.choice(self.job_names), self.rng.choice(self.table_names)
            role = "source" if self.rng.random() < 0.5 else "sink"
        known = job in self.model.jobs and table in self.model.tables
        self._refresh_head()
        answer = self.wire.delete(
            f"/register/{role}/{job}/{table_path(table)}", expect={200} if known else {"not_found"}
        )
        self._note(f"remove {role} {job} {table} → {answer.outcome()} {answer.body if answer.ok else ''}")
        if not answer.ok:
            return
        had = self.model.role_of(job, table) == role
        expected = {"job_id": job, "table": table, "role": role, "removed": had}
        if {k: answer.json().get(k) for k in expected} != expected:
            self._fail(f"removing {role} {job} {table} answered {answer.body}, expected {expected}")
        if had:
            self.model.remove_edge(job, table, role)

    def _unregister(self) -> None:
        job = self.rng.choice(self.job_names)
        self._refresh_head()
        answer = self.wire.post(f"/unregister/{job}", expect={200} if job in self.model.jobs else {"not_found"})
        self._note(f"unregister {job} → {answer.outcome()}")
        if answer.ok:
            self.model.unregister(job)

    def _report(self) -> None:
        writerless = sorted(t for t in self.model.tables if self.model.writer(t) is None)
        if writerless and self.rng.random() < 0.8:
            table = self.rng.choice(writerless)
        else:
            table = self.rng.choice(self.table_names)  # also 409 not_root and 404 not_found
        expected: set[int | str] = {200}
        if table not in self.model.tables:
            expected = {"not_found"}
        elif self.model.writer(table) is not None:
            expected = {"not_root"}
        snapshot_id = self.model.fresh_id(table)
        answer = self.wire.post(f"/tables/{table_path(table)}/snapshots", {"snapshot_id": snapshot_id}, expect=expected)
        self._note(f"report {table}={snapshot_id} → {answer.outcome()}")
        if answer.ok:
            self.model.reported_snapshot(table, snapshot_id)
            if answer.json()["latest_snapshot_id"] != snapshot_id:
                self._fail(f"report of {table}={snapshot_id} answered {answer.body}")

    def _issue(self) -> None:
        issued = self.wire.post("/barriers", {}, expect={201}).json()
        if issued["barrier"] <= self.model.head:
            self._fail(f"barrier {issued['barrier']} issued after barrier {self.model.head}")
        self.model.head = issued["barrier"]
        unknown = {t: s for t, s in issued["sealed"].items() if (t, s) not in self.model.provenance}
        self._note(f"issue → {issued['barrier']} sealing {issued['sealed']}")
        if unknown:
            self._fail(f"barrier {issued['barrier']} sealed snapshots nobody reported: {unknown}")

    def _run(self) -> None:
        active = sorted(self.model.active)
        job = self.rng.choice(active) if active and self.rng.random() < 0.85 else self.rng.choice(self.job_names)
        decision = self._next(job)
        if decision is None or decision["action"] != "process":
            return
        follow_up = self.rng.choices(list(self.follow_ups), list(self.follow_ups.values()))[0]
        self.figures.actions[f"run: {follow_up}"] += 1
        if follow_up == "commit":
            self._commit(job, decision)
        elif follow_up == "abort":
            self.wire.post(f"/jobs/{job}/barriers/{decision['barrier']}/abort", {"reason": "walk"}, expect={200})
            self.model.in_flight.pop(job, None)
            self._note(f"abort {job} {decision['barrier']}")
        else:
            self._note(f"crash {job} with {decision['barrier']} in flight")

    def _late_commit(self) -> None:
        """Commit a barrier that a change of the job's lineage aborted (rule 7): 409 `not_in_flight`."""
        if not self.model.aborted_by_change:
            self._run()
            return
        job = self.rng.choice(sorted(self.model.aborted_by_change))
        barrier = self.model.aborted_by_change.pop(job)
        outputs = {t: self.model.fresh_id(t) for t in self.model.sinks.get(job, {})}
        expected: set[int | str] = {"not_in_flight"}
        if job not in self.model.active:
            expected.add("job_unregistered")
        url = f"/jobs/{job}/barriers/{barrier}/commit"
        answer = self.wire.post(url, {"snapshots": outputs}, expect=expected)
        self._note(f"late commit {job} {barrier} {outputs} → {answer.outcome()}")

    def _rollback(self) -> None:
        with_data = sorted({table for table, _ in self.model.provenance})
        barriers = self.wire.get("/barriers", params={"limit": 30}, expect={200}).json()["barriers"]
        if not with_data or not barriers:
            self._note("rollback: nothing to roll back yet")
            return
        table, barrier = self.rng.choice(with_data), self.rng.choice(barriers)["barrier"]
        body = {"table": table, "barrier": barrier}
        plan = self.wire.post("/rollbacks", body, expect={201, "rollback_conflict"})
        self._note(f"plan rollback {table} to {barrier} → {plan.outcome()}")
        if not plan.ok:
            return
        restore = {t: int(p["restore_snapshot_id"]) for t, p in plan.json()["tables"].items()}
        unknown = {t: s for t, s in restore.items() if (t, s) not in self.model.provenance}
        if unknown:
            self._fail(f"rollback plan restores snapshots nobody wrote: {unknown} ({plan.body})")
        done = self.wire.post(f"/rollbacks/{plan.json()['rollback_id']}/complete", {}, expect={200, "rollback_stale"})
        self._note(f"complete rollback → {done.outcome()} restoring {restore}, jobs {sorted(plan.json()['jobs'])}")
        if done.ok:
            self.model.rolled_back(restore, plan.json()["jobs"])
        self._refresh_head()

    # --- one job step --------------------------------------------------------------------------------------------

    def _next(self, job: str) -> dict[str, Any] | None:
        expected: set[int | str] = {200}
        if job not in self.model.jobs:
            expected = {"not_found"}
        elif job not in self.model.active:
            expected = {"job_unregistered"}
        roots = self.model.root_snapshots(job)
        answer = self.wire.post(f"/jobs/{job}/barriers/next", {"root_snapshots": roots}, expect=expected)
        self._refresh_head()
        if not answer.ok:
            self._note(f"next {job} {roots} → {answer.outcome()}")
            return None
        decision = answer.json()
        self._note(f"next {job} {roots} → {_brief(decision)}")
        self._check_decision(job, decision)
        return decision

    def _check_decision(self, job: str, decision: Mapping[str, Any]) -> None:
        action, barrier = decision["action"], decision.get("barrier")
        if action not in ("process", "wait", "idle"):
            self._fail(f"next of {job}: unknown action {action!r}")
        crashed = self.model.in_flight.get(job)
        if action == "process" and barrier == self.model.aborted_by_change.get(job):
            self._fail(f"{job} was handed barrier {barrier} again, though a change of its lineage aborted it (rule 7)")
        if crashed is not None and (action, barrier, decision.get("inputs")) != ("process", *crashed.offered):
            self._fail(
                f"{job} crashed with barrier {crashed.barrier} in flight and nothing changed its lineage, but "
                f"next answered {_brief(decision)} instead of the same barrier and inputs {crashed.offered[1]}"
            )
        if action == "wait":  # what it waits for may lag legitimately now; the drain checks it is an orphan's
            waiting_for = decision.get("waiting_for")
            if not isinstance(waiting_for, list) or not set(waiting_for) <= self.model.tables:
                self._fail(f"{job} waits without a list of the tables it waits for: {decision}")
        if action != "process":
            return
        barrier = int(decision["barrier"])
        inputs = {t: int(v["snapshot_id"]) for t, v in decision["inputs"].items()}
        if set(inputs) != set(self.model.sources.get(job, {})) or set(decision["sinks"]) != set(
            self.model.sinks.get(job, {})
        ):
            self._fail(
                f"{job} was handed barrier {barrier} with inputs {sorted(inputs)} and sinks "
                f"{sorted(decision['sinks'])}, but its sources are {sorted(self.model.sources.get(job, {}))} and "
                f"its sinks {sorted(self.model.sinks.get(job, {}))}"
            )
        if not 0 < barrier <= self.model.head:
            self._fail(f"{job} was handed barrier {barrier}, never issued (newest: {self.model.head})")
        problems = self.model.not_produced_together(barrier, inputs)
        if problems:
            self._fail(f"{job} was handed inputs never produced together at {barrier}: {inputs}: {problems}")
        last_read = self.model.last_read.get(job)
        if crashed is None and last_read is not None:
            previous = {t: v["previous_snapshot_id"] for t, v in decision["inputs"].items()}
            expected = {t: last_read.get(t) for t in inputs}
            if previous != expected:
                self._fail(
                    f"{job} at {barrier}: previous_snapshot_id {previous}, but its last committed barrier read "
                    f"{last_read} (rule 4)"
                )
        self.model.in_flight[job] = InFlight(barrier, inputs, (barrier, decision["inputs"]))

    def _commit(self, job: str, decision: Mapping[str, Any]) -> None:
        outputs = {t: self.model.fresh_id(t) for t in self.model.sinks.get(job, {})}
        barrier = decision["barrier"]
        answer = self.wire.post(f"/jobs/{job}/barriers/{barrier}/commit", {"snapshots": outputs}, expect={200})
        if answer.json()["snapshots"] != outputs:
            self._fail(f"commit of {job} {barrier} {outputs} answered {answer.body}")
        self.model.committed(job, {t: int(v["snapshot_id"]) for t, v in decision["inputs"].items()}, outputs)
        self._note(f"commit {job} {barrier} {outputs}")

    # --- checks after every step ---------------------------------------------------------------------------------

    def _check_reads(self) -> None:
        tables = sorted(self.model.tables)
        if not tables:
            return
        for _ in range(READS_PER_STEP - 1):
            chosen = self.rng.sample(tables, self.rng.randint(1, min(3, len(tables))))
            consistency = self.rng.choice(("weak", "strong"))
            body = {"tables": chosen, "consistency": consistency}
            answer = self.wire.post("/versions", body, expect={200, "no_consistent_version"})
            found = (answer.json()["barrier"], answer.json()["versions"]) if answer.ok else None
            self._check_read(chosen, consistency, found, answer)
        table, consistency = self.rng.choice(tables), self.rng.choice(("weak", "strong"))
        answer = self.wire.get(f"/version/{consistency}/{table_path(table)}", expect={200, "no_consistent_version"})
        found = (answer.json()["barrier"], {table: answer.json()["snapshot_id"]}) if answer.ok else None
        self._check_read([table], consistency, found, answer)

    def _check_read(
        self, tables: list[str], consistency: str, found: tuple[int, dict[str, int]] | None, answer: Answer
    ) -> None:
        self.figures.reads_checked += 1
        if found is not None:
            self.figures.consistent_sets += 1
            barrier, versions = found
            if set(versions) != set(tables) or not 0 < barrier <= self.model.head:
                self._fail(f"{consistency} read of {tables} answered {answer.body} (newest barrier {self.model.head})")
            problems = self.model.not_produced_together(barrier, versions)
            if problems:
                why = "; ".join(problems)
                self._fail(
                    f"{consistency} read of {tables} answered a set never produced together: {answer.body}: {why}"
                )
        if consistency == "strong":
            self.figures.strong_answers += found is not None
            went_back = self.model.strong_went_back(tables, found[0] if found else None)
            if went_back:
                self._fail(went_back + " without a rollback")

    def _drain(self) -> None:
        """Liveness: with no new data, next/commit for every job ends in `idle` everywhere it can.

        Rounds of next/commit over every active job until a round changes nothing (no `process`, no job's last
        barrier moved: a `next` may settle a bounded number of barriers per call), then every table that can
        reach the newest barrier must have, and every job must be `idle` or wait on what may hold it back."""
        self.figures.drains += 1
        self._note("drain: issue a barrier, then next/commit every active job until nothing changes")
        self._issue()
        final: dict[str, Mapping[str, Any]] = {}
        settled: dict[str, Any] = {}
        for _ in range(DRAIN_ROUNDS):
            progressed, final = False, {}
            for job in sorted(self.model.active):
                committed = 0
                for _ in range(MAX_BARRIERS_PER_DRAIN):
                    decision = self._next(job)
                    assert decision is not None  # an active job's next is 200 (checked by `expect`)
                    if decision["action"] != "process":
                        final[job] = decision
                        break
                    if decision["barrier"] <= committed:
                        self._fail(f"stuck: {job} was handed {decision['barrier']} after committing {committed}")
                    self._commit(job, decision)
                    committed, progressed = decision["barrier"], True
                else:
                    self._fail(f"stuck: {job} still processes after {MAX_BARRIERS_PER_DRAIN} barriers in one drain")
                last = self.wire.get(f"/jobs/{job}", expect={200}).json()["last_barrier"]
                progressed = progressed or settled.get(job) != last
                settled[job] = last
            if not progressed:
                break
        else:
            self._fail(f"stuck: jobs still make progress after {DRAIN_ROUNDS} drain rounds")
        blocked = self.model.blocked()
        for table in sorted(self.model.tables - blocked):
            info = self.wire.get(f"/tables/{table_path(table)}", expect={200}).json()
            if info["newest_complete_barrier"] != self.model.head:
                writer = self.model.writer(table)
                self._fail(
                    f"stuck state: {table} (writer {writer}, answered {_brief(final.get(writer or '', {}))}) "
                    f"completed barrier {info['newest_complete_barrier']}, not the newest {self.model.head}"
                )
        for job, answered in sorted(final.items()):
            if answered["action"] == "idle":
                continue
            waiting_for = set(answered.get("waiting_for") or ())
            if not set(self.model.sources.get(job, {})) & blocked or not waiting_for or not waiting_for <= blocked:
                self._fail(
                    f"stuck state: with no new data {job} answers {_brief(answered)}; of its sources "
                    f"{sorted(self.model.sources.get(job, {}))} only {sorted(blocked)} may hold it back"
                )
        actions = {j: d["action"] for j, d in sorted(final.items())}
        self._note(f"drain done at {self.model.head}: {actions}")

    # --- helpers -------------------------------------------------------------------------------------------------

    def _refresh_head(self) -> None:
        listed = self.wire.get("/barriers", params={"limit": 1}, expect={200}).json()["barriers"]
        head = int(listed[0]["barrier"]) if listed else 0
        if head < self.model.head:
            self._fail(f"the newest barrier went back from {self.model.head} to {head}")
        self.model.head = head

    def _note(self, text: str) -> None:
        self.log.append(f"{self.step:>6}  {text}")

    def _fail(self, message: str) -> NoReturn:
        raise ContractBroken(message)


def _brief(decision: Mapping[str, Any]) -> str:
    """A `next` answer in one short line for the step log."""
    if not decision:
        return "-"
    text = f"{decision.get('action')} {decision.get('barrier')}"
    if decision.get("action") == "process":
        inputs = {t: (v["snapshot_id"], v["previous_snapshot_id"]) for t, v in decision["inputs"].items()}
        text += f" inputs {inputs}"
    if decision.get("waiting_for"):
        text += f" waiting for {decision['waiting_for']}"
    if decision.get("skipped"):
        text += f" skipped {len(decision['skipped'])}"
    return text
