"""The concurrent model checker: several client threads against two (or more) server processes on one database.

Threads, each with its own seeded random choices:
- workers run jobs: `next` (reporting the roots they read), then commit (sometimes twice, to both servers, as a
  retry after a lost answer would), abort, or crash (walk away: a later `next` must replay the barrier);
- an ingest thread reports root snapshots and issues barriers;
- readers ask weak, strong and freshness-bounded reads;
- a chaos thread changes the lineage: unregisters and re-registers jobs, toggles sources and sinks, hands a table
  over to another job and back, and plans and completes rollbacks.
Every request goes to a server chosen at random. After the run a drain brings the lineage back to its base,
runs every job until it is idle, and checks that every table reached the newest barrier; then `Record.check`
checks the whole history (tests/checker/record.py).

The jobs write no data: a job's output is a fresh snapshot id per sink, and the checker remembers which inputs
built it, which is all the checks need.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.checker.record import Change, Handed, Outcome, Read, Record, RefusedRepeat

ROOTS = ("lake.raw.r1", "lake.raw.r2", "lake.raw.r3")
# The base lineage (seven jobs, one component through r1/r2 and one through r3, joined by j5).
BASE: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "j1": (("lake.raw.r1",), ("lake.mid.t1",)),
    "j2": (("lake.raw.r1", "lake.raw.r2"), ("lake.mid.t2",)),
    "j3": (("lake.mid.t1", "lake.mid.t2"), ("lake.mid.t3",)),
    "j4": (("lake.raw.r3",), ("lake.mid.t4",)),
    "j5": (("lake.mid.t3", "lake.mid.t4"), ("lake.mart.t5",)),
    "j6": (("lake.mid.t2",), ("lake.mart.t6",)),
    "j7": (("lake.raw.r3",), ("lake.mart.t7",)),
}
# Edges chaos adds and removes (acyclic with the base by construction).
EXTRA_SOURCES: Mapping[str, tuple[str, ...]] = {
    "j6": ("lake.mid.t1",),
    "j5": ("lake.raw.r2",),
    "j7": ("lake.mid.t4",),
    "j3": ("lake.raw.r3",),
}
EXTRA_SINKS: Mapping[str, tuple[str, ...]] = {"j4": ("lake.mart.t8",), "j1": ("lake.mart.t9",)}
SPARE = "jx"  # takes lake.mart.t6 over from j6 (reading lake.mid.t2) and hands it back
HANDED_TABLE, HANDED_SOURCE = "lake.mart.t6", "lake.mid.t2"
TABLES = sorted(
    {t for sources, sinks in BASE.values() for t in (*sources, *sinks)}
    | {t for extra in (*EXTRA_SOURCES.values(), *EXTRA_SINKS.values()) for t in extra}
)
TIMEOUT = 30.0
DRAIN_ROUNDS = 30
PROBLEM_JSON = "application/problem+json"


def path(table: str) -> str:
    return table.replace(".", "/")


@dataclass
class Figures:
    seed: int
    seconds: float = 0.0
    requests: int = 0
    handed: int = 0
    commits: int = 0
    aborts: int = 0
    crashes: int = 0
    reads: int = 0
    read_sets: int = 0
    changes: Counter[str] = field(default_factory=Counter)
    drain_rounds: int = 0
    head: int = 0

    def summary(self, record: Record) -> str:
        unavailable = sum(n for k, n in record.statuses.items() if k.split("→ ")[1].startswith(("503", "504", "429")))
        return (
            f"concurrent checker: seed {self.seed}, {self.seconds:.0f} s, {self.requests} requests "
            f"({unavailable} answered 503/504/429), {self.handed} barriers handed out, {self.commits} commits, "
            f"{self.aborts} aborts, {self.crashes} crashes, {self.reads} reads ({self.read_sets} answered a set), "
            f"lineage changes {dict(self.changes)}, drain in {self.drain_rounds} rounds to barrier {self.head}"
        )


class Api:
    """One thread's HTTP clients to every server; every answer is recorded, a server chosen at random per call."""

    def __init__(self, urls: Sequence[str], record: Record, rng: random.Random, figures: Figures) -> None:
        self.clients = [httpx.Client(base_url=u, timeout=TIMEOUT) for u in urls]
        self.record, self.rng, self.figures = record, rng, figures

    def call(
        self, method: str, url: str, body: Any = None, *, server: int | None = None, params: Any = None
    ) -> tuple[int, Any, float, float, int]:
        """(status, JSON body or problem, start, end, server index); a transport error is status 0."""
        index = self.rng.randrange(len(self.clients)) if server is None else server
        start = time.monotonic()
        try:
            response = self.clients[index].request(method, url, json=body, params=params)
        except httpx.HTTPError as error:
            end = time.monotonic()
            self.record.answered(f"{method} {_route(url)}", 0, type(error).__name__, str(error))
            return 0, None, start, end, index
        end = time.monotonic()
        self.figures.requests += 1
        payload: Any = None
        if response.content:
            try:
                payload = response.json()
            except ValueError:
                payload = response.text
        code = payload.get("code") if isinstance(payload, dict) and response.status_code >= 400 else None
        if response.status_code >= 400 and response.headers.get("content-type", "").split(";")[0] != PROBLEM_JSON:
            self.record.violations.append(f"{method} {url} answered {response.status_code} without problem+json")
        self.record.answered(f"{method} {_route(url)}", response.status_code, code, response.text)
        return response.status_code, payload, start, end, index

    def close(self) -> None:
        for c in self.clients:
            c.close()


def _route(url: str) -> str:
    parts = url.split("/")
    if url.startswith("/jobs/"):
        return "/jobs/{job}/barriers/" + parts[-1] if len(parts) > 4 else "/jobs/{job}"
    if url.startswith("/register/") or url.startswith("/tables/"):
        return "/".join(parts[:3]) + "/…"
    return "/".join(parts[:2])


@dataclass
class Lineage:
    """The chaos thread's view of what it changed (the workers only read it)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sources: dict[str, set[str]] = field(default_factory=lambda: {j: set(s) for j, (s, _) in BASE.items()})
    sinks: dict[str, set[str]] = field(default_factory=lambda: {j: set(k) for j, (_, k) in BASE.items()})
    down: set[str] = field(default_factory=set)  # unregistered jobs
    handed_over: bool = False

    def roots_of(self, job: str) -> list[str]:
        with self.lock:
            return sorted(t for t in self.sources.get(job, ()) if t in ROOTS)


class Checker:
    """One run: `run(seconds)` drives the threads, drains, checks; `problems` lists what broke."""

    def __init__(self, urls: Sequence[str], *, seed: int, workers: int = 3, readers: int = 2) -> None:
        self.urls, self.seed = list(urls), seed
        self.record = Record()
        self.figures = Figures(seed)
        self.lineage = Lineage()
        self.stop = threading.Event()
        self.workers, self.readers = workers, readers
        self.job_locks = {j: threading.Lock() for j in (*BASE, SPARE)}
        self.next_id: dict[str, int] = {}
        self.id_lock = threading.Lock()
        self.latest: dict[str, int] = {}  # newest root snapshot written to "storage"
        # what a job "wrote" for (barrier, inputs), reused when it runs the barrier again after a crash (the client's
        # exactly-once lookup); a rollback restores storage, after which nothing written before is reused
        self.written: dict[tuple[str, int, int, tuple[tuple[str, int], ...]], dict[str, int]] = {}
        self.restores: Counter[str] = Counter()
        self.head_seen = 0
        self.errors: list[BaseException] = []

    # --- the run -------------------------------------------------------------------------------------------------

    def run(self, seconds: float) -> list[str]:
        rng = random.Random(self.seed)
        api = self._api(rng)
        self._register_base(api)
        for root in ROOTS:
            self._ingest_one(api, root, barrier=False)
        api.call("POST", "/barriers", {})
        started = time.monotonic()
        threads = [
            *(self._thread(f"worker-{i}", self._worker, rng.randrange(2**32)) for i in range(self.workers)),
            *(self._thread(f"reader-{i}", self._reader, rng.randrange(2**32)) for i in range(self.readers)),
            self._thread("ingest", self._ingest, rng.randrange(2**32)),
            self._thread("chaos", self._chaos, rng.randrange(2**32)),
        ]
        for t in threads:
            t.start()
        self.stop.wait(seconds)
        self.stop.set()
        for t in threads:
            t.join(TIMEOUT * 4)
        self.figures.seconds = time.monotonic() - started
        if self.errors:
            raise self.errors[0]
        problems = self._drain(api)
        problems += self._acknowledged_commits_are_visible(api)
        problems += self._every_completion_agrees_with_its_roots(api)
        api.close()
        return problems + self.record.check()

    def _thread(self, name: str, body: Callable[[Api, random.Random], None], seed: int) -> threading.Thread:
        def main() -> None:
            rng = random.Random(seed)
            api = self._api(rng)
            try:
                while not self.stop.is_set():
                    body(api, rng)
            except BaseException as error:  # surfaced by run(): a bug of the checker, not of the server
                self.errors.append(error)
                self.stop.set()
            finally:
                api.close()

        return threading.Thread(target=main, name=name, daemon=True)

    def _api(self, rng: random.Random) -> Api:
        return Api(self.urls, self.record, rng, self.figures)

    def _fresh(self, table: str) -> int:
        with self.id_lock:
            self.next_id[table] = self.next_id.get(table, 0) + 1
            return self.next_id[table]

    # --- workers ---------------------------------------------------------------------------------------------

    def _worker(self, api: Api, rng: random.Random) -> None:
        job = rng.choice([*BASE, SPARE])
        lock = self.job_locks[job]
        if not lock.acquire(blocking=False):
            return
        try:
            self._step(api, rng, job)
        finally:
            lock.release()

    def _step(self, api: Api, rng: random.Random, job: str) -> None:
        roots = {t: self.latest[t] for t in self.lineage.roots_of(job) if t in self.latest}
        status, body, start, end, server = api.call("POST", f"/jobs/{job}/barriers/next", {"root_snapshots": roots})
        if status != 200 or body["action"] != "process":
            return
        barrier = int(body["barrier"])
        inputs = {t: int(v["snapshot_id"]) for t, v in body["inputs"].items()}
        self.record.add(Handed(job, barrier, inputs, start, end, server))
        self.figures.handed += 1
        key = (job, self.restores[job], barrier, tuple(sorted(inputs.items())))
        outputs = self.written.get(key)
        # A crashed run wrote these already: reuse them, as the client's exactly-once lookup does (rule 11), unless
        # a sink's baseline moved past the write (another writer committed on top meanwhile: a hand-over and back),
        # when the client writes anew.
        baselines = {sink: answer.get("previous_snapshot_id") for sink, answer in body["sinks"].items()}
        if (
            outputs is None
            or set(outputs) != set(baselines)
            or any(baselines[s] is not None and outputs[s] <= baselines[s] for s in outputs)
        ):
            outputs = {sink: self._fresh(sink) for sink in body["sinks"]}
            self.record.wrote(outputs, inputs)
            self.written[key] = outputs
        choice = rng.random()
        if choice < 0.70:
            if not self._commit(api, rng, job, barrier, outputs):
                self.written.pop(key, None)  # refused: the client undoes its write (rule 11)
        elif choice < 0.80:
            self.written.pop(key, None)  # aborting, the client restores the sinks it wrote
            status, _, start, end, server = api.call(
                "POST", f"/jobs/{job}/barriers/{barrier}/abort", {"reason": "checker"}
            )
            kind = "aborted" if status == 200 else "unknown" if status in (0, 504) else "refused"
            self.record.add(Outcome(job, barrier, kind, {}, start, end, server))
            self.figures.aborts += status == 200
        else:
            self.record.add(Outcome(job, barrier, "crashed", {}, end, end, server))
            self.figures.crashes += 1

    def _commit(self, api: Api, rng: random.Random, job: str, barrier: int, outputs: dict[str, int]) -> bool:
        """Commit; False when refused (the barrier was aborted meanwhile)."""
        body = {"snapshots": outputs}
        status, answer, start, end, server = api.call("POST", f"/jobs/{job}/barriers/{barrier}/commit", body)
        if status == 200 and rng.random() < 0.15:  # a retry after a lost answer, through the other server
            again, repeated, _, repeat_end, _ = api.call(
                "POST", f"/jobs/{job}/barriers/{barrier}/commit", body, server=(server + 1) % len(api.clients)
            )
            what = f"a repeated commit of {job} {barrier} answered {again} {repeated}, the first {answer}"
            if again == 409 and isinstance(repeated, dict) and repeated.get("code") == "not_in_flight":
                # right only when a rollback of the job undid the barrier in between (judged after the run, when
                # every completed rollback is recorded)
                self.record.refused_repeat(RefusedRepeat(job, barrier, start, repeat_end, what))
            elif again != 200 or repeated != answer:
                self.record.violations.append(what)
        kind = "committed" if status == 200 else "unknown" if status in (0, 504, 503) else "refused"
        if status == 409 and isinstance(answer, dict) and answer.get("code") not in ("not_in_flight",):
            self.record.violations.append(f"commit of {job} {barrier} {outputs} answered 409 {answer}")
        self.record.add(Outcome(job, barrier, kind, outputs, start, end, server))
        self.figures.commits += status == 200
        return kind != "refused"

    # --- ingestion -------------------------------------------------------------------------------------------

    def _ingest(self, api: Api, rng: random.Random) -> None:
        choice = rng.random()
        if choice < 0.55:
            self._ingest_one(api, rng.choice(ROOTS), barrier=rng.random() < 0.4)
        else:
            status, body, *_ = api.call("POST", "/barriers", {})
            if status == 201:
                self.head_seen = max(self.head_seen, int(body["barrier"]))

    def _ingest_one(self, api: Api, root: str, *, barrier: bool) -> None:
        snapshot = self._fresh(root)
        self.record.reported(root, snapshot)
        self.latest[root] = snapshot  # in storage first, then reported (as ingestion done right does)
        if barrier:
            api.call("POST", "/barriers", {"root_snapshots": {root: snapshot}})
        else:
            api.call("POST", f"/tables/{path(root)}/snapshots", {"snapshot_id": snapshot})

    # --- readers ---------------------------------------------------------------------------------------------

    def _reader(self, api: Api, rng: random.Random) -> None:
        tables = tuple(sorted(rng.sample(TABLES, rng.randint(1, 3))))
        consistency = rng.choice(("weak", "strong"))
        kind = rng.random()
        if kind < 0.15:
            table = tables[0]
            status, body, start, end, server = api.call("GET", f"/version/{consistency}/{path(table)}")
            versions = {table: int(body["snapshot_id"])} if status == 200 else {}
            tables = (table,)
        else:
            request: dict[str, Any] = {"tables": list(tables), "consistency": consistency}
            if kind < 0.25:
                request |= {"min_barrier": self.head_seen or 1, "wait_seconds": 0.5}
            status, body, start, end, server = api.call("POST", "/versions", request)
            versions = {t: int(s) for t, s in body["versions"].items()} if status == 200 else {}
        self.figures.reads += 1
        if status == 200:
            self.figures.read_sets += 1
            if set(versions) != set(tables):
                self.record.violations.append(f"a read of {list(tables)} answered {body}")
        elif status == 404 and isinstance(body, dict) and body.get("code") == "not_found":
            return  # a table chaos has not registered yet
        elif status not in (404, 409) and status < 500 and status != 0:
            self.record.violations.append(f"a read of {list(tables)} answered {status} {body}")
        barrier = int(body["barrier"]) if status == 200 else None
        if status in (200, 404):
            self.record.add(Read(tables, consistency, barrier, versions, start, end, server))

    # --- chaos -----------------------------------------------------------------------------------------------

    def _chaos(self, api: Api, rng: random.Random) -> None:
        action = rng.choices(
            ["source", "sink", "unregister", "reregister", "hand_over", "rollback", "pause"], [5, 3, 2, 4, 2, 1, 6]
        )[0]
        if action == "source":
            job = rng.choice(sorted(EXTRA_SOURCES))
            self._toggle(api, job, rng.choice(EXTRA_SOURCES[job]), "source")
        elif action == "sink":
            job = rng.choice(sorted(EXTRA_SINKS))
            self._toggle(api, job, rng.choice(EXTRA_SINKS[job]), "sink")
        elif action == "unregister":
            job = rng.choice([j for j in BASE if j != "j6" or not self.lineage.handed_over])
            self._changed("unregister", {job}, lambda: api.call("POST", f"/unregister/{job}"))
            with self.lineage.lock:
                self.lineage.down.add(job)
        elif action == "reregister":
            with self.lineage.lock:
                down = sorted(self.lineage.down)
            if down:
                self._reregister(api, rng.choice(down))
        elif action == "hand_over":
            self._hand_over(api)
        elif action == "rollback":
            self._rollback(api, rng)
        else:
            self.stop.wait(0.05)  # chaos comes in bursts; this is pacing, not synchronisation

    def _changed(self, kind: str, jobs: set[str], call: Callable[[], Any]) -> Any:
        start = time.monotonic()
        result = call()
        self.record.add(Change(kind, frozenset(jobs), frozenset(), start, time.monotonic()))
        self.figures.changes[kind] += 1
        return result

    def _toggle(self, api: Api, job: str, table: str, role: str) -> None:
        with self.lineage.lock:
            if job in self.lineage.down:
                return
            edges = self.lineage.sources if role == "source" else self.lineage.sinks
            present = table in edges[job]
        method = "DELETE" if present else "POST"
        status, *_ = self._changed(
            f"{role} toggle", {job}, lambda: api.call(method, f"/register/{role}/{job}/{path(table)}")
        )
        if status in (200, 201):
            with self.lineage.lock:
                (edges[job].discard if present else edges[job].add)(table)

    def _reregister(self, api: Api, job: str) -> None:
        with self.lineage.lock:
            sources, sinks = sorted(self.lineage.sources[job]), sorted(self.lineage.sinks[job])
        if job == "j6" and self.lineage.handed_over:
            sinks = [s for s in sinks if s != HANDED_TABLE]

        def register() -> list[int]:
            return [api.call("POST", f"/register/source/{job}/{path(t)}")[0] for t in sources] + [
                api.call("POST", f"/register/sink/{job}/{path(t)}")[0] for t in sinks
            ]

        statuses = self._changed("reregister", {job}, register)
        if all(s in (200, 201) for s in statuses):
            with self.lineage.lock:
                self.lineage.down.discard(job)

    def _hand_over(self, api: Api) -> None:
        with self.lineage.lock:
            if "j6" in self.lineage.down:
                return
            over = self.lineage.handed_over
        if not over:  # j6 gives lake.mart.t6 to jx

            def give() -> list[int]:
                first = api.call("DELETE", f"/register/sink/j6/{path(HANDED_TABLE)}")[0]
                return [
                    first,
                    api.call("POST", f"/register/source/{SPARE}/{path(HANDED_SOURCE)}")[0],
                    api.call("POST", f"/register/sink/{SPARE}/{path(HANDED_TABLE)}")[0],
                ]

            statuses = self._changed("hand over", {"j6", SPARE}, give)
            if statuses[0] == 200 and statuses[2] in (200, 201):
                with self.lineage.lock:
                    self.lineage.handed_over = True
                    self.lineage.sinks["j6"].discard(HANDED_TABLE)
        else:  # and takes it back

            def back() -> list[int]:
                return [
                    api.call("POST", f"/unregister/{SPARE}")[0],
                    api.call("POST", f"/register/sink/j6/{path(HANDED_TABLE)}")[0],
                ]

            statuses = self._changed("hand back", {"j6", SPARE}, back)
            if statuses[1] in (200, 201):
                with self.lineage.lock:
                    self.lineage.handed_over = False
                    self.lineage.sinks["j6"].add(HANDED_TABLE)

    def _rollback(self, api: Api, rng: random.Random) -> None:
        """Roll a table back to its strong version (every table around it holds a snapshot there)."""
        table = rng.choice(TABLES)
        status, version, *_ = api.call("POST", "/versions", {"tables": [table], "consistency": "strong"})
        if status != 200:
            return
        barrier = int(version["barrier"])
        status, plan, *_ = api.call("POST", "/rollbacks", {"table": table, "barrier": barrier})
        if status != 201:
            return
        start = time.monotonic()
        # Nothing written before the rollback completes is reused after it: a run handed out between the plan and
        # its completion still saw the old state, so the count moves on both sides of the completion.
        for job in plan["jobs"]:
            self.restores[job] += 1
        status, *_ = api.call("POST", f"/rollbacks/{plan['rollback_id']}/complete", {})
        end = time.monotonic()
        for job in plan["jobs"]:
            self.restores[job] += 1
        if status == 200 or status in (0, 504):  # an unknown outcome may have completed it
            jobs, tables = frozenset(plan["jobs"]), frozenset(plan["tables"])
            self.record.add(Change("rollback", jobs, tables, start, end, barrier))
            self.figures.changes["rollback"] += 1

    # --- after the run ---------------------------------------------------------------------------------------

    def _register_base(self, api: Api) -> None:
        for job, (sources, sinks) in BASE.items():
            for t in sources:
                api.call("POST", f"/register/source/{job}/{path(t)}")
            for t in sinks:
                api.call("POST", f"/register/sink/{job}/{path(t)}")

    def _drain(self, api: Api) -> list[str]:
        """Liveness: with the lineage back at its base and no new data, every job ends idle and every table at the
        newest barrier, without any barrier issued by hand."""

        def reset() -> None:
            api.call("POST", f"/unregister/{SPARE}")
            for job, extras in EXTRA_SOURCES.items():
                for t in extras:
                    api.call("DELETE", f"/register/source/{job}/{path(t)}")
            for job, extras in EXTRA_SINKS.items():
                for t in extras:
                    api.call("DELETE", f"/register/sink/{job}/{path(t)}")
            self._register_base(api)

        self._changed("drain reset", {*BASE, SPARE}, reset)
        problems: list[str] = []
        final: dict[str, Any] = {}
        for self.figures.drain_rounds in range(1, DRAIN_ROUNDS + 1):
            before = self._head(api)
            progressed = False
            for job in BASE:
                for _ in range(1000):
                    roots = {t: self.latest[t] for t in BASE[job][0] if t in ROOTS}
                    status, body, start, end, server = api.call(
                        "POST", f"/jobs/{job}/barriers/next", {"root_snapshots": roots}
                    )
                    if status != 200:
                        problems.append(f"drain: next of {job} answered {status} {body}")
                        return problems
                    final[job] = body
                    if body["action"] != "process":
                        break
                    barrier = int(body["barrier"])
                    inputs = {t: int(v["snapshot_id"]) for t, v in body["inputs"].items()}
                    outputs = {sink: self._fresh(sink) for sink in body["sinks"]}
                    self.record.wrote(outputs, inputs)
                    self.record.add(Handed(job, barrier, inputs, start, end, server))
                    url = f"/jobs/{job}/barriers/{barrier}/commit"
                    status, body, start, end, server = api.call("POST", url, {"snapshots": outputs})
                    self.record.add(Outcome(job, barrier, "committed", outputs, start, end, server))
                    if status != 200:
                        problems.append(f"drain: commit of {job} {barrier} answered {status} {body}")
                        return problems
                    progressed = True
            if not progressed and self._head(api) == before:  # nothing processed, no barrier issued meanwhile
                break
        else:
            problems.append(f"drain: jobs still process after {DRAIN_ROUNDS} rounds")
        head = self._head(api)
        self.figures.head = head
        for job, answer in sorted(final.items()):
            if answer["action"] != "idle":
                problems.append(f"drain: with no new data {job} answers {answer}")
        status, at_head, *_ = api.call("GET", f"/barriers/{head}")
        for table in sorted({t for s, k in BASE.values() for t in (*s, *k)}):
            state = at_head["tables"].get(table, {}).get("state")
            if state != "complete":
                problems.append(
                    f"drain: {table} is {state} at the newest barrier {head}: {at_head['tables'].get(table)}"
                )
        for table in sorted({t for _, k in BASE.values() for t in k}):
            status, answer, *_ = api.call("GET", f"/version/strong/{path(table)}")
            if status != 200 or answer["barrier"] != head:
                problems.append(f"drain: strong read of {table} answered {status} {answer}, not barrier {head}")
        return problems

    def _head(self, api: Api) -> int:
        status, listed, *_ = api.call("GET", "/barriers", params={"limit": 1})
        assert status == 200 and listed["barriers"], listed
        return int(listed["barriers"][0]["barrier"])

    def _acknowledged_commits_are_visible(self, api: Api) -> list[str]:
        """Every acknowledged commit is in the job's history read through the other server, unless a completed
        rollback forgot it."""
        problems = []
        rollbacks = [c for c in self.record.changes if c.kind == "rollback"]
        histories: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
        for outcome in self.record.outcomes:
            if outcome.kind != "committed":
                continue
            other = (outcome.server + 1) % len(self.urls)
            key = (outcome.job, other)
            if key not in histories:
                histories[key] = self._history(api, outcome.job, other)
            run = histories[key].get(outcome.barrier)
            forgotten = any(
                outcome.job in c.jobs
                and c.barrier is not None
                and c.barrier < outcome.barrier
                and c.end > outcome.start
                for c in rollbacks
            )
            if forgotten:
                continue
            if run is None or run["status"] != "committed" or run["outputs"] != dict(outcome.outputs):
                problems.append(
                    f"the commit of {outcome.job} {outcome.barrier} {dict(outcome.outputs)} acknowledged by server "
                    f"{outcome.server} reads as {run} through server {other}"
                )
        return problems

    def _every_completion_agrees_with_its_roots(self, api: Api) -> list[str]:
        """The whole stored history, not just what reads happened to see: at every barrier, every table that holds
        a snapshot holds one built from the very root snapshots sealed at that barrier."""
        barriers = self._pages(api, "/barriers", "barriers", key="barrier")
        head = max(barriers) if barriers else 0
        held: dict[str, list[tuple[int, int, int]]] = {}  # table → (first, last, snapshot) of ranges with data
        for table in TABLES:
            ranges = self._pages(api, f"/tables/{path(table)}/barriers", "ranges", key="first_barrier")
            held[table] = [
                (int(r["first_barrier"]), int(r["last_barrier"] or head), int(r["snapshot_id"]))
                for r in ranges.values()
                if r["snapshot_id"] is not None
            ]

        def at(table: str, barrier: int) -> int | None:
            return next((snap for first, last, snap in held[table] if first <= barrier <= last), None)

        problems = []
        for barrier in sorted(barriers):
            for table in TABLES:
                snapshot = at(table, barrier)
                if snapshot is None or table in ROOTS:
                    continue
                for root, values in self.record.provenance(table, snapshot).items():
                    sealed = at(root, barrier) if root in ROOTS else None
                    if root in ROOTS and values != {sealed}:
                        problems.append(
                            f"at barrier {barrier} {table} holds {snapshot}, built from {root}={sorted(values)}, "
                            f"but {root} holds {sealed} there"
                        )
        return problems[:50]

    def _pages(self, api: Api, url: str, field_name: str, *, key: str) -> dict[int, dict[str, Any]]:
        """Every item of a newest-first listing paged with `before`, by `key`."""
        items: dict[int, dict[str, Any]] = {}
        before: int | None = None
        while True:
            params: dict[str, Any] = {"limit": 1000} | ({"before": before} if before is not None else {})
            status, body, *_ = api.call("GET", url, params=params)
            if status != 200:  # recorded as the answer it is (a 5xx fails the run)
                return items
            page = body[field_name]
            if not page:
                return items
            for item in page:
                items[int(item[key])] = item
            lowest = min(int(item[key]) for item in page)
            if before is not None and lowest >= before:
                return items
            before = lowest

    def _history(self, api: Api, job: str, server: int) -> dict[int, dict[str, Any]]:
        runs: dict[int, dict[str, Any]] = {}
        before: int | None = None
        while True:
            params: dict[str, Any] = {"limit": 1000} | ({"before": before} if before is not None else {})
            status, body, *_ = api.call("GET", f"/jobs/{job}/barriers", params=params, server=server)
            if status != 200 or not body["runs"]:
                return runs
            for run in body["runs"]:
                runs.setdefault(int(run["first_barrier"]), run)
            before = min(int(r["first_barrier"]) for r in body["runs"])
