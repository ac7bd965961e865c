"""A history checker: 100 concurrent clients against two servers on one database, under kill -9 and connection drops.

Every client runs randomized register / next / commit / abort / versions / POST /barriers calls through the
real `MetaServiceClient` (with its retries) against one of two `metaservice serve` processes that reach
PostgreSQL through the fault proxy. Meanwhile the test kills each server with SIGKILL and restarts it, and drops
every database connection. Each operation is recorded with its invocation time, completion time and outcome:

- `ok`: an answer 2xx; the operation took effect exactly as answered;
- `fail`: a 4xx problem; the operation had no effect;
- `unknown`: the client gave up (retries exhausted, or `OutcomeUnknown`); it may or may not have taken effect;
- `server_error`: a 500, which is a violation by itself.

After the traffic the final state is read back over the API and the history is checked:
1. barriers are unique and ordered by real time: a barrier issued by `POST /barriers` is greater than every
   barrier any operation saw before it was invoked, and the barrier list is ordered by issue time;
2. nothing acknowledged is lost: every acknowledged barrier, registration, commit (with its snapshots) and abort
   is in the final state;
3. deterministic replay and aligned inputs: every `process` answer for one (job, barrier) names the same inputs,
   and each input snapshot is the one its table holds at that barrier;
4. strong versions never go back in time: within a lineage component, a strong answer's barrier is at least
   that of every strong answer completed before it was invoked (there is no rollback in this test);
5. every version answer is a real completion: each snapshot returned is the one the table holds at the
   returned barrier (`GET /tables/{c}/{d}/{t}/barriers`).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from spark_client import MetaServiceClient, MetaServiceError, OutcomeUnknown, RetryPolicy, Unavailable
from spark_client.errors import ServerError
from tests.faults.conftest import Servers
from tests.faults.proxy import FaultProxy
from tests.support import table_path

pytestmark = [pytest.mark.crash, pytest.mark.xdist_group("faults")]

CLIENTS = 100
TRAFFIC_SECONDS = 20.0
SEED = 20_240_276
CLIENT_RETRY = RetryPolicy(attempts=40, deadline=10, initial_backoff=0.05, max_backoff=1.0)
CLIENT_TIMEOUT = 10.0
SERVER_ENV = {"METASERVICE_POOL_SIZE": "8", "METASERVICE_MAX_OVERFLOW": "4"}
# Each client pauses a random while between operations (mean THINK_SECONDS), as real jobs and dashboards do; the
# offered load then stays near what two single-process servers on two shared cores can serve.
THINK_SECONDS = 0.5

A, B, C = "lake.raw.a", "lake.raw.b", "lake.raw.c"
A1, B1, AB, TOP, C1 = "lake.mid.a1", "lake.mid.b1", "lake.mart.ab", "lake.mart.top", "lake.mid.c1"
ROOTS = (A, B, C)
# a chain with a join: a ─ ja ─► a1 ─┐
#                                    ├─ join ─► ab ─ top ─► top        c ─ jc ─► c1
#                      b ─ jb ─► b1 ─┘
PIPELINE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ja": ((A,), (A1,)),
    "jb": ((B,), (B1,)),
    "join": ((A1, B1), (AB,)),
    "top": ((AB,), (TOP,)),
    "jc": ((C,), (C1,)),
}
COMPONENTS = {"main": (A, B, A1, B1, AB, TOP), "side": (C, C1)}
COMPONENT_OF = {table: name for name, tables in COMPONENTS.items() for table in tables}
TABLES = tuple(COMPONENT_OF)

Outcome = Literal["ok", "fail", "unknown", "server_error"]
Consistency = Literal["strong", "weak"]
MOSTLY_STRONG: tuple[Consistency, ...] = ("strong", "strong", "weak")
# The only refusals a correct server gives this traffic: two clients of one job race to commit or abort the
# barrier in flight, and one of them loses. Anything else (a 409 on `next`, a 404 on a version after the
# warm-up completed every table) is a violation.
EXPECTED_REFUSALS = {
    "commit": {"not_in_flight", "snapshot_conflict"},
    "abort": {"already_committed", "not_in_flight"},
}


@dataclass
class Op:
    """One operation of the history."""

    client: int
    kind: str
    args: dict[str, Any]
    invoked: float
    completed: float = 0.0
    outcome: Outcome = "unknown"
    result: Any = None
    error: str | None = None


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, client: int, kind: str, args: dict[str, Any], call: Callable[[], Any]) -> Op:
        op = Op(client, kind, args, invoked=time.monotonic())
        try:
            op.result = call()
            op.outcome = "ok"
        except (OutcomeUnknown, Unavailable) as exc:
            op.error = f"{type(exc).__name__}: {exc}"
        except ServerError as exc:
            op.outcome, op.error = "server_error", f"{exc.status} {exc.code}: {exc}"
        except MetaServiceError as exc:
            if exc.status is not None and 400 <= exc.status < 500:
                op.outcome, op.error = "fail", exc.code
            else:
                op.error = f"{type(exc).__name__}: {exc}"
        op.completed = time.monotonic()
        with self._lock:
            self.ops.append(op)
        return op


class Roots:
    """The newest snapshot of each root table "in storage", as the clients see it; only grows."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters = {root: itertools.count(2) for root in ROOTS}
        self._current = dict.fromkeys(ROOTS, 1)

    def bump(self, root: str) -> int:
        with self._lock:
            self._current[root] = next(self._counters[root])
            return self._current[root]

    def current(self, root: str) -> int:
        with self._lock:
            return self._current[root]


class Snapshots:
    """Fresh snapshot ids per sink, increasing in the order they are handed out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters = {sink: itertools.count(2) for _, sinks in PIPELINE.values() for sink in sinks}

    def fresh(self, sink: str) -> int:
        with self._lock:
            return next(self._counters[sink])


@dataclass
class Traffic:
    history: History
    roots: Roots
    snapshots: Snapshots
    stop: threading.Event

    def client(self, index: int, base_url: str) -> None:
        rng = random.Random(SEED + index)
        throwaway = itertools.count()
        with MetaServiceClient(base_url, retry=CLIENT_RETRY, timeout=CLIENT_TIMEOUT) as client:
            while not self.stop.wait(min(rng.expovariate(1 / THINK_SECONDS), 4 * THINK_SECONDS)):
                roll = rng.random()
                if roll < 0.45:
                    self._job_step(index, client, rng)
                elif roll < 0.70:
                    tables = rng.sample(COMPONENTS[rng.choice(("main", "main", "side"))], rng.randint(1, 2))
                    consistency = rng.choice(MOSTLY_STRONG)
                    args = {"tables": tables, "consistency": consistency}
                    self.history.run(index, "versions", args, functools.partial(client.versions, tables, consistency))
                elif roll < 0.78:
                    table, consistency = rng.choice(TABLES), rng.choice(MOSTLY_STRONG)
                    args = {"tables": [table], "consistency": consistency}
                    self.history.run(index, "version", args, functools.partial(client.version, table, consistency))
                elif roll < 0.86:
                    reported = {root: self.roots.bump(root) for root in rng.sample(ROOTS, rng.randint(0, 2))}
                    call = functools.partial(client.issue_barrier, reported)
                    self.history.run(index, "issue", {"roots": reported}, call)
                else:
                    self._register(index, client, rng, throwaway)

    def _job_step(self, index: int, client: MetaServiceClient, rng: random.Random) -> None:
        job = rng.choice(tuple(PIPELINE))
        sources, sinks = PIPELINE[job]
        reported = {
            t: (self.roots.bump(t) if rng.random() < 0.4 else self.roots.current(t)) for t in sources if t in ROOTS
        }
        next_call = functools.partial(client.next_barrier, job, reported)
        op = self.history.run(index, "next", {"job": job, "roots": reported}, next_call)
        if op.outcome != "ok" or op.result.action != "process":
            return
        barrier = int(op.result.barrier)
        if rng.random() < 0.85:
            outputs = {sink: self.snapshots.fresh(sink) for sink in sinks}
            args = {"job": job, "barrier": barrier, "snapshots": outputs}
            self.history.run(index, "commit", args, lambda: client.commit_barrier(job, barrier, outputs))
        else:
            args = {"job": job, "barrier": barrier}
            self.history.run(index, "abort", args, lambda: client.abort_barrier(job, barrier, reason="history"))

    def _register(self, index: int, client: MetaServiceClient, rng: random.Random, throwaway: Iterator[int]) -> None:
        if rng.random() < 0.5:
            job = rng.choice(tuple(PIPELINE))
            sources, sinks = PIPELINE[job]
            role: Literal["source", "sink"] = rng.choice(("source", "sink"))
            table = rng.choice(sources if role == "source" else sinks)
        else:  # a job of its own lineage component, so the pipeline's strong versions are not affected
            n = next(throwaway)
            job, table, role = f"tmp-{index}-{n}", f"lake.tmp.t{index}_{n}", "sink"
        register = client.register_source if role == "source" else client.register_sink
        self.history.run(index, "register", {"job": job, "table": table, "role": role}, lambda: register(job, table))


# --- the final state, read back over the API -------------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    first: int
    last: int | None
    snapshot_id: int | None


@dataclass
class FinalState:
    barriers: list[dict[str, Any]]
    runs: dict[str, list[dict[str, Any]]]
    ranges: dict[str, list[Range]]
    jobs: dict[str, dict[str, Any]]

    def snapshot_at(self, table: str, barrier: int) -> int | Literal["none"] | None:
        """The snapshot `table` holds at `barrier`; "none" when no range covers it."""
        ranges = self.ranges[table]  # ascending by first barrier
        i = bisect.bisect_right([r.first for r in ranges], barrier) - 1
        if i < 0:
            return "none"
        found = ranges[i]
        if found.last is not None and found.last < barrier:
            return "none"
        return found.snapshot_id


def pages(api: httpx.Client, url: str, key: str, order: str) -> list[dict[str, Any]]:
    """Every entry of a newest-first list, paging with `before`."""
    entries: list[dict[str, Any]] = []
    before: int | None = None
    for _ in range(1000):
        params: dict[str, int] = {"limit": 1000} if before is None else {"limit": 1000, "before": before}
        response = api.get(url, params=params)
        assert response.status_code == 200, response.text
        page = response.json()[key]
        entries += page
        if len(page) < 1000:
            return entries
        before = min(int(e[order]) for e in page)
    raise AssertionError(f"{url} did not end")


def read_final_state(api: httpx.Client, history: Sequence[Op]) -> FinalState:
    jobs = set(PIPELINE) | {op.args["job"] for op in history if op.kind == "register" and op.outcome == "ok"}
    return FinalState(
        barriers=pages(api, "/barriers", "barriers", "barrier"),
        runs={job: pages(api, f"/jobs/{job}/barriers", "runs", "first_barrier") for job in PIPELINE},
        ranges={
            table: sorted(
                (
                    Range(r["first_barrier"], r["last_barrier"], r["snapshot_id"])
                    for r in pages(api, f"/tables/{table_path(table)}/barriers", "ranges", "first_barrier")
                ),
                key=lambda r: r.first,
            )
            for table in TABLES
        },
        jobs={job: api.get(f"/jobs/{job}").json() for job in sorted(jobs)},
    )


# --- the checker -----------------------------------------------------------------------------------------------


def observed_barrier(op: Op) -> int | None:
    """A barrier that existed when `op` completed, as its answer shows."""
    if op.outcome != "ok":
        return None
    if op.kind in ("next", "versions", "version", "issue", "commit"):
        value = op.result.barrier
        return None if value is None else int(value)
    if op.kind == "abort":
        return int(op.args["barrier"])
    return None


def check(history: Sequence[Op], final: FinalState) -> list[str]:
    violations: list[str] = []
    ok = [op for op in history if op.outcome == "ok"]

    violations += [f"500 answer: {op.kind} {op.args}: {op.error}" for op in history if op.outcome == "server_error"]
    violations += [
        f"{op.kind} {op.args} was refused with {op.error}"
        for op in history
        if op.outcome == "fail" and op.error not in EXPECTED_REFUSALS.get(op.kind, set())
    ]

    # 1. barriers: unique, durable, ordered by real time and by issue time
    issued = [op for op in ok if op.kind == "issue"]
    counts = Counter(int(op.result.barrier) for op in issued)
    violations += [f"barrier {b} was issued {n} times" for b, n in counts.items() if n > 1]
    durable = {int(b["barrier"]) for b in final.barriers}
    violations += [f"acknowledged barrier {b} is lost" for b in counts if b not in durable]
    by_value = sorted(final.barriers, key=lambda b: int(b["barrier"]))
    for earlier, later in itertools.pairwise(by_value):
        if earlier["issued_at"] > later["issued_at"]:
            violations.append(f"barrier {later['barrier']} was issued before the smaller {earlier['barrier']}")
    seen = sorted((op.completed, b) for op in ok if (b := observed_barrier(op)) is not None)
    completions, highest = [t for t, _ in seen], list(itertools.accumulate((b for _, b in seen), max))
    for op in issued:
        i = bisect.bisect_left(completions, op.invoked) - 1
        if i >= 0 and highest[i] >= int(op.result.barrier):
            violations.append(
                f"POST /barriers gave {op.result.barrier}, not above barrier {highest[i]} seen before it was invoked"
            )

    # 2. nothing acknowledged is lost
    runs = {(job, int(r["barrier"])): r for job, entries in final.runs.items() for r in entries}
    for op in ok:
        if op.kind == "commit":
            job, barrier, snapshots = op.args["job"], op.args["barrier"], op.args["snapshots"]
            run = runs.get((job, barrier))
            if run is None or run["status"] != "committed" or run["outputs"] != snapshots:
                violations.append(f"acknowledged commit {job}@{barrier} {snapshots} is lost: {run}")
            for sink, snapshot in snapshots.items():
                held = final.snapshot_at(sink, barrier)
                if held != snapshot:
                    violations.append(f"{sink} holds {held} at {barrier}, but {job} committed {snapshot}")
        elif op.kind == "abort":
            run = runs.get((op.args["job"], op.args["barrier"]))
            if run is None or run["status"] != "aborted":
                violations.append(f"acknowledged abort {op.args} is lost: {run}")
        elif op.kind == "register":
            info = final.jobs.get(op.args["job"], {})
            if op.args["table"] not in info.get("sources" if op.args["role"] == "source" else "sinks", []):
                violations.append(f"acknowledged registration {op.args} is lost: {info}")

    # 3. deterministic replay and aligned inputs
    offered: dict[tuple[str, int], dict[str, Any]] = {}
    for op in ok:
        if op.kind != "next" or op.result.action != "process":
            continue
        key = (op.args["job"], int(op.result.barrier))
        inputs = {t: (s.snapshot_id, s.previous_snapshot_id) for t, s in op.result.inputs.items()}
        if offered.setdefault(key, inputs) != inputs:
            violations.append(f"{key} was offered with inputs {offered[key]} and then {inputs}")
        for table, (snapshot, _) in inputs.items():
            held = final.snapshot_at(table, key[1])
            if held != snapshot:
                violations.append(f"{key[0]} was told to read {table}@{snapshot} at {key[1]}, which holds {held}")

    # 4. strong versions never go back; 5. every version answer is a real completion
    strong: dict[str, list[Op]] = defaultdict(list)
    for op in ok:
        if op.kind not in ("versions", "version"):
            continue
        barrier = int(op.result.barrier)
        answer = dict(op.result.versions) if op.kind == "versions" else {op.result.table: op.result.snapshot_id}
        if set(answer) != set(op.args["tables"]):
            violations.append(f"{op.kind} {op.args} answered for other tables: {answer}")
        for table, snapshot in answer.items():
            held = final.snapshot_at(table, barrier)
            if held != snapshot:
                violations.append(f"{op.kind} {op.args} gave {table}@{snapshot} at {barrier}, the table held {held}")
        if op.args["consistency"] == "strong":
            strong[COMPONENT_OF[op.args["tables"][0]]].append(op)
    for component, answers in strong.items():
        done = sorted(answers, key=lambda op: op.completed)
        times = [op.completed for op in done]
        newest = list(itertools.accumulate((int(op.result.barrier) for op in done), max))
        for op in answers:
            i = bisect.bisect_left(times, op.invoked) - 1
            if i >= 0 and newest[i] > int(op.result.barrier):
                violations.append(
                    f"strong version of {component} went back from {newest[i]} to {op.result.barrier} ({op.args})"
                )
    return violations


# --- the test --------------------------------------------------------------------------------------------------


def warm_up(client: MetaServiceClient) -> None:
    """Register the pipeline and complete one barrier in every table, so strong versions cover all of them."""
    for job, (sources, sinks) in PIPELINE.items():
        for table in sources:
            client.register_source(job, table)
        for table in sinks:
            client.register_sink(job, table)
    client.issue_barrier(dict.fromkeys(ROOTS, 1))
    for job in ("ja", "jb", "jc", "join", "top"):
        decision = client.next_barrier(job, {t: 1 for t in PIPELINE[job][0] if t in ROOTS})
        assert decision.action == "process" and decision.barrier is not None, decision
        client.commit_barrier(job, decision.barrier, dict.fromkeys(PIPELINE[job][1], 1))


def server_errors(log: Path) -> str:
    """The servers' logged errors (a 500 logs its traceback), so a failure here names its cause."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    picked = [i for i, line in enumerate(lines) if " ERROR " in line]
    blocks = ["\n".join(lines[i : i + 40]) for i in picked[:3]]
    return "\n\nserver errors:\n" + "\n---\n".join(blocks) if blocks else ""


def test_history_of_concurrent_clients_under_faults_has_no_violations(
    servers: Servers, proxy: FaultProxy, faults_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="spark_client")  # thousands of expected "retrying" warnings
    url = proxy.route(faults_database)
    fleet = [servers.start(url, env=SERVER_ENV) for _ in range(2)]
    with MetaServiceClient(fleet[0].base_url, retry=CLIENT_RETRY) as client:
        warm_up(client)

    history, stop = History(), threading.Event()
    traffic = Traffic(history, Roots(), Snapshots(), stop)
    threads = [
        threading.Thread(target=traffic.client, args=(i, fleet[i % 2].base_url), name=f"client-{i}", daemon=True)
        for i in range(CLIENTS)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    faults: list[str] = []
    try:
        for step in range(4):  # spread the faults over the traffic window
            stop.wait(max(0.0, started + (step + 1) * TRAFFIC_SECONDS / 5 - time.monotonic()))
            if step % 2 == 0:
                victim = fleet[step // 2]
                victim.kill()
                fleet[step // 2] = servers.start(url, port=victim.port, env=SERVER_ENV)
                faults.append(f"kill -9 server {step // 2}")
            else:
                proxy.refuse()
                dropped = proxy.drop()
                stop.wait(0.5)  # the outage lasts half a second
                proxy.heal()
                faults.append(f"drop {dropped} db connections")
        stop.wait(max(0.0, started + TRAFFIC_SECONDS - time.monotonic()))
    finally:
        stop.set()
        proxy.heal()
        deadline = time.monotonic() + CLIENT_RETRY.deadline + 2 * CLIENT_TIMEOUT
        for thread in threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
    elapsed = time.monotonic() - started
    assert not any(thread.is_alive() for thread in threads), "clients did not stop"

    ops = sorted(history.ops, key=lambda op: op.invoked)
    with httpx.Client(base_url=fleet[0].base_url, timeout=30) as api:
        final = read_final_state(api, ops)
    violations = check(ops, final)
    outcomes = Counter(op.outcome for op in ops)
    refusals = Counter(f"{op.kind}:{op.error}" for op in ops if op.outcome == "fail")
    kinds = Counter(op.kind for op in ops if op.outcome == "ok")
    print(
        f"\nhistory: {len(ops)} operations run by {CLIENTS} clients on 2 servers in {elapsed:.1f}s "
        f"({dict(outcomes)}; ok by kind {dict(kinds)}; refused {dict(refusals)}); {len(final.barriers)} barriers; "
        f"faults injected: {len(faults)} ({', '.join(faults)}); violations found: {len(violations)}"
    )
    assert len(faults) == 4
    assert kinds["commit"] > 0 and kinds["versions"] > 0 and kinds["issue"] > 0, "the traffic did too little"
    assert not violations, "\n".join(violations[:30]) + server_errors(servers.log_dir / "servers.log")
