"""The barrier protocol's statements coalesced across steps (db/coalescer.py, repositories/protocol.py).

One gather statement answers several steps, each exactly as a gather of its job alone would; one write statement
stores several plans, each under its own compare-and-set, and skips a plan whose job another transaction holds
locked (that step then stores alone and waits, so one contended job never holds up the others). The coalescer
never puts two requests that touch one job in one statement, runs a batch PostgreSQL refused request by request,
and charges each request its share of the statement; a step whose deadline passes answers 504 once the statement
carrying its write was sent, 503 before.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from metaservice.db import statements
from metaservice.db.coalescer import Coalescer
from metaservice.db.database import Connection, Database
from metaservice.db.transaction import Unit, in_autocommit
from metaservice.domain.world import Writes
from metaservice.errors import OutcomeUnknown, Unavailable
from metaservice.repositories import protocol as protocol_rows
from metaservice.repositories.protocol import Gathered, GatherRequest
from metaservice.runtime import Runtime
from metaservice.services import barriers, tokens
from metaservice.services.planner import Planner
from metaservice.settings import Settings

R1, R2, MID, OUT, X = "lake.raw.r1", "lake.raw.r2", "lake.mid.m", "lake.mart.s", "lake.mart.x"


def _register(api: httpx.Client, job: str, sources: Sequence[str], sinks: Sequence[str]) -> None:
    for role, tables in (("source", sources), ("sink", sinks)):
        for table in tables:
            response = api.post(f"/register/{role}/{job}/{table.replace('.', '/')}")
            assert response.status_code == 201, response.text


def _next(api: httpx.Client, job: str, roots: dict[str, int] | None = None) -> dict[str, Any]:
    response = api.post(f"/jobs/{job}/barriers/next", json={"root_snapshots": roots or {}})
    assert response.status_code == 200, response.text
    decision: dict[str, Any] = response.json()
    return decision


def _commit(api: httpx.Client, job: str, barrier: int, snapshots: dict[str, int]) -> None:
    response = api.post(f"/jobs/{job}/barriers/{barrier}/commit", json={"snapshots": snapshots})
    assert response.status_code == 200, response.text


def _cycle(api: httpx.Client, job: str, roots: dict[str, int], snapshots: dict[str, int]) -> int:
    decision = _next(api, job, roots)
    assert decision["action"] == "process", decision
    _commit(api, job, decision["barrier"], snapshots)
    return int(decision["barrier"])


def _pipeline(api: httpx.Client) -> dict[str, int]:
    """a: r1 → m; b: m, r2 → s; c: r2 → x. c runs ahead of b (their windows of r2 start at different barriers);
    a and b each leave a barrier in flight. The in-flight barrier of each job, by name."""
    _register(api, "a", [R1], [MID])
    _register(api, "b", [MID, R2], [OUT])
    _register(api, "c", [R2], [X])
    issued = api.post("/barriers", json={"root_snapshots": {R1: 1, R2: 1}})
    assert issued.status_code == 201, issued.text
    _cycle(api, "a", {}, {MID: 1})
    _cycle(api, "b", {}, {OUT: 1})
    for snapshot in (2, 3, 4):
        _cycle(api, "c", {R2: snapshot}, {X: snapshot})
    _cycle(api, "a", {R1: 2}, {MID: 2})
    in_flight = {}
    for job, roots in (("b", {R2: 5}), ("a", {R1: 3})):
        decision = _next(api, job, roots)
        assert decision["action"] == "process", decision
        in_flight[job] = int(decision["barrier"])
    return in_flight


def _run_with_db(database_url: str, work: Any) -> Any:
    async def main() -> Any:
        db = Database(Settings(database_url=database_url))
        await db.open()
        runtime = Runtime(db)
        try:
            return await work(runtime)
        finally:
            await runtime.close()
            await db.close()

    return anyio.run(main)


def test_a_batched_gather_answers_each_step_as_its_own_gather(api: httpx.Client, database_url: str) -> None:
    in_flight = _pipeline(api)
    # the lineage changed: d lost its only source, e was retired
    _register(api, "d", [R1], ["lake.mart.d"])
    assert api.request("DELETE", f"/register/source/d/{R1.replace('.', '/')}").status_code == 200
    _register(api, "e", [MID], ["lake.mart.e"])
    assert api.post("/unregister/e").status_code == 200
    requests = [
        GatherRequest("b"),
        GatherRequest("a", in_flight["a"], windows=False),
        GatherRequest("nope"),
        GatherRequest("c"),
        GatherRequest("b", in_flight["b"], windows=False),
        GatherRequest("b"),  # the same step twice (a retry racing): two answers, neither shared
        GatherRequest("a"),
        GatherRequest("d"),  # a sink and no source
        GatherRequest("e"),  # retired: no current edges
    ]

    async def gathers(db: Runtime) -> tuple[list[Gathered], list[Gathered]]:
        async with db.database.connection() as conn:
            together = await protocol_rows.gather_many(conn, requests)
            alone = [(await protocol_rows.gather_many(conn, [r]))[0] for r in requests]
        return together, alone

    together, alone = _run_with_db(database_url, gathers)
    for request, batched, single in zip(requests, together, alone, strict=True):
        assert batched == single, request
    b, b_at = together[0], together[4]
    assert (
        b.world.jobs is not together[5].world.jobs
        and b.world.tables[b.world.jobs[b.job_id].sinks[0]]
        is not (together[5].world.tables[b.world.jobs[b.job_id].sinks[0]])
    ), "plans change their world: no view may be shared between answers"
    assert together[2].job_id is None and not together[2].world.jobs
    d, e = together[7], together[8]
    assert d.job_id is not None and not d.world.jobs[d.job_id].sources and len(d.world.tables) == 1
    assert e.job_id is not None and not e.world.jobs[e.job_id].active and not e.world.tables
    assert b_at.run_at is not None and b_at.run_at.first == in_flight["b"]
    # c's window of r2 starts at its own newest barrier, b's at b's: the batch fetched both
    r2_b = next(t for t in b.world.tables.values() if t.name == R2)
    r2_c = next(t for t in together[3].world.tables.values() if t.name == R2)
    assert r2_b.known != r2_c.known
    r2_b_at = next(t for t in b_at.world.tables.values() if t.name == R2)
    assert r2_b.known and not r2_b_at.known, "a gather without windows knows no input ranges beyond the newest"


async def _commit_plan(conn: Connection, job: str, barrier: int, snapshot: int) -> Writes:
    """The writes of committing `barrier` of `job` (its one sink at `snapshot`), planned on a fresh gather."""
    g = await protocol_rows.gather(conn, name=job, barrier=barrier, windows=False)
    assert g.job_id is not None and g.run_at is not None
    planner = Planner(g.world)
    sink = g.world.tables[g.world.jobs[g.job_id].sinks[0]].name
    planner.commit(g.job_id, barrier, {sink: snapshot}, g.run_at)
    return planner.writes


def test_one_statement_stores_each_plan_under_its_own_compare_and_set(api: httpx.Client, database_url: str) -> None:
    in_flight = _pipeline(api)
    c_barrier = _next(api, "c", {R2: 5})["barrier"]

    async def store(db: Runtime) -> list[str]:
        async with db.database.connection() as conn:
            plans = [
                await _commit_plan(conn, "a", in_flight["a"], 3),
                await _commit_plan(conn, "b", in_flight["b"], 2),
                await _commit_plan(conn, "c", c_barrier, 5),
            ]
            # b's lineage changes meanwhile: a new sink (which aborts its barrier in flight, rule 7)
            assert api.post("/register/sink/b/lake/mart/b2").status_code == 201
            answers = await protocol_rows.apply_many(conn, plans)
            for plan, answer in zip(plans, answers, strict=True):
                stored = await (
                    await conn.execute(
                        "SELECT count(*) FROM snapshot_ranges WHERE id = ANY(%s) AND job_id = ANY(%s)",
                        [[r.id for r in plan.new_ranges], list(plan.expect)],
                    )
                ).fetchone()
                assert stored is not None
                if answer == "stored":  # the world names the rows the statement inserted
                    assert all(r.id is not None for r in plan.new_ranges) and stored[0] == len(plan.new_ranges)
                else:
                    assert all(r.id is None for r in plan.new_ranges)
        return list(answers)

    assert _run_with_db(database_url, store) == ["stored", "changed", "stored"]
    runs = {job: api.get(f"/jobs/{job}/barriers").json()["runs"][0] for job in ("a", "b", "c")}
    assert (runs["a"]["status"], runs["a"]["outputs"]) == ("committed", {MID: 3})
    assert (runs["b"]["status"], runs["b"]["barrier"]) == ("aborted", in_flight["b"])  # nothing of b's plan
    assert "lineage changed" in runs["b"]["reason"]
    assert (runs["c"]["status"], runs["c"]["outputs"]) == ("committed", {X: 5})
    assert api.get("/tables/lake/mart/s").json()["latest_snapshot_id"] == 1


def test_a_plan_whose_job_another_transaction_holds_is_skipped_not_waited_for(
    api: httpx.Client, database_url: str
) -> None:
    in_flight = _pipeline(api)

    async def store(db: Runtime) -> tuple[list[str], list[str]]:
        async with db.database.connection() as conn:
            plans = [await _commit_plan(conn, "a", in_flight["a"], 3), await _commit_plan(conn, "b", in_flight["b"], 2)]
        async with await psycopg.AsyncConnection.connect(database_url) as holder:
            await holder.execute("SELECT 1 FROM jobs WHERE name = 'b' FOR UPDATE")
            async with db.database.connection() as conn:
                with anyio.fail_after(30):  # a statement that waited for b would wait until the holder ends
                    skipped = await protocol_rows.apply_many(conn, plans, skip_locked=True)
            await holder.rollback()
        async with db.database.connection() as conn:
            again = await protocol_rows.apply_many(conn, plans[1:], skip_locked=True)
        return list(skipped), list(again)

    assert _run_with_db(database_url, store) == (["stored", "locked"], ["stored"])
    for job, sink, snapshot in (("a", MID, 3), ("b", OUT, 2)):
        run = api.get(f"/jobs/{job}/barriers").json()["runs"][0]
        assert (run["status"], run["outputs"]) == ("committed", {sink: snapshot})


def test_a_step_whose_job_is_locked_waits_alone_while_other_steps_are_stored(
    api: httpx.Client, database_url: str
) -> None:
    in_flight = _pipeline(api)
    c_barrier = _next(api, "c", {R2: 5})["barrier"]

    async def commits(db: Runtime) -> tuple[str, str]:
        async with (
            await psycopg.AsyncConnection.connect(database_url) as holder,
            await psycopg.AsyncConnection.connect(database_url, autocommit=True) as monitor,
        ):
            await holder.execute("SELECT 1 FROM jobs WHERE name = 'b' FOR UPDATE")
            b = asyncio.ensure_future(
                barriers.commit_barrier(db, job_id="b", barrier=in_flight["b"], snapshots={OUT: 2})
            )
            with anyio.fail_after(30):
                while await _lock_waiters(monitor) < 1:  # b's step planned, was skipped, and waits alone
                    assert not b.done(), b.result()
                    await asyncio.sleep(0.01)
                # the writes coalesced meanwhile are not held up by b
                c = await barriers.commit_barrier(db, job_id="c", barrier=c_barrier, snapshots={X: 5})
                a = await barriers.commit_barrier(db, job_id="a", barrier=in_flight["a"], snapshots={MID: 3})
            assert not b.done(), "b's commit was answered while its job was locked"
            await holder.rollback()
            with anyio.fail_after(30):
                answered = await b
        assert (c.barrier, a.barrier) == (c_barrier, in_flight["a"])
        return answered.job_id, str(answered.snapshots)

    assert _run_with_db(database_url, commits) == ("b", str({OUT: 2}))
    run = api.get("/jobs/b/barriers").json()["runs"][0]
    assert (run["status"], run["outputs"]) == ("committed", {OUT: 2})


async def _lock_waiters(monitor: psycopg.AsyncConnection[Any]) -> int:
    row = await (
        await monitor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = 'metaservice'"
        )
    ).fetchone()
    return int(row[0]) if row else 0


# --- the coalescer -------------------------------------------------------------------------------------------------


def _divide(batches: list[list[int]]) -> Any:
    """A coalesced statement answering 100 / n for each request n (n = 0: PostgreSQL refuses the statement)."""

    async def run(conn: Connection, requests: Sequence[int]) -> list[int]:
        batches.append(list(requests))
        row = await (
            await conn.execute(
                "SELECT array_agg(100 / n ORDER BY i) FROM unnest(%s::int[]) WITH ORDINALITY AS u(n, i)",
                [list(requests)],
            )
        ).fetchone()
        assert row is not None
        return list(row[0])

    return run


def test_requests_that_arrive_together_share_a_statement_and_their_shares_of_it(database_url: str) -> None:
    batches: list[list[int]] = []

    async def main(db: Runtime) -> tuple[list[int], list[float]]:
        coalescer: Coalescer[int, int] = Coalescer(db.database, _divide(batches), name="test", writes=False)

        async def one(n: int) -> tuple[int, float]:
            tally, token = statements.start()
            try:
                return await coalescer.submit(n), tally.statements
            finally:
                statements.stop(token)

        try:
            answered = await asyncio.gather(*(one(n) for n in (1, 2, 4, 5)))
        finally:
            await coalescer.close()
        return [a for a, _ in answered], [s for _, s in answered]

    answers, shares = _run_with_db(database_url, main)
    assert answers == [100, 50, 25, 20]
    assert batches == [[1, 2, 4, 5]]
    assert shares == [0.25] * 4


def test_requests_touching_one_key_never_share_a_statement(database_url: str) -> None:
    batches: list[list[int]] = []

    async def main(db: Runtime) -> list[int]:
        coalescer: Coalescer[int, int] = Coalescer(
            db.database, _divide(batches), name="test", writes=True, keys=lambda n: {n % 3}
        )
        try:
            return list(await asyncio.gather(*(coalescer.submit(n) for n in (1, 2, 4, 5, 3))))
        finally:
            await coalescer.close()

    assert _run_with_db(database_url, main) == [100, 50, 25, 20, 33]
    assert batches == [[1, 2, 3], [4, 5]]  # 4 and 5 share keys with 1 and 2: next statement, first in line


def test_a_batch_postgresql_refuses_is_run_request_by_request(database_url: str) -> None:
    batches: list[list[int]] = []

    async def main(db: Runtime) -> list[Any]:
        coalescer: Coalescer[int, int] = Coalescer(db.database, _divide(batches), name="test", writes=True)
        try:
            return list(await asyncio.gather(*(coalescer.submit(n) for n in (4, 0, 5)), return_exceptions=True))
        finally:
            await coalescer.close()

    answers = _run_with_db(database_url, main)
    assert answers[0] == 25 and answers[2] == 20
    assert isinstance(answers[1], RuntimeError) and "division by zero" in str(answers[1])  # a bug: a logged 500
    assert batches == [[4, 0, 5], [4], [0], [5]]


def test_a_caller_that_gave_up_before_its_statement_was_sent_is_not_sent(database_url: str) -> None:
    batches: list[list[int]] = []

    async def main(db: Runtime) -> list[bool]:
        coalescer: Coalescer[int, int] = Coalescer(db.database, _divide(batches), name="test", writes=True)
        sent = [False, False]
        try:
            gave_up = asyncio.ensure_future(coalescer.submit(1, on_send=lambda: sent.__setitem__(0, True)))
            await asyncio.sleep(0)  # queued
            gave_up.cancel()  # its deadline passed before the batch was taken
            assert await coalescer.submit(2, on_send=lambda: sent.__setitem__(1, True)) == 50
            with pytest.raises(asyncio.CancelledError):
                await gave_up
        finally:
            await coalescer.close()
        return sent

    assert _run_with_db(database_url, main) == [False, True]
    assert batches == [[2]]


def test_the_coalesced_connections_plan_prepared_statements_once(database_url: str) -> None:
    """The gathers' and writes' connections are the server's own (generic plans, timeouts, application name)."""

    async def main(db: Runtime) -> list[Any]:
        seen: list[Any] = []

        async def show(conn: Connection, requests: Sequence[int]) -> list[int]:
            row = await (await conn.execute("SHOW plan_cache_mode")).fetchone()
            name = await (await conn.execute("SHOW application_name")).fetchone()
            seen.append((row, name))
            return list(requests)

        coalescer: Coalescer[int, int] = Coalescer(db.database, show, name="test", writes=False)
        try:
            await coalescer.submit(1)
        finally:
            await coalescer.close()
        return seen

    assert _run_with_db(database_url, main) == [(("force_generic_plan",), ("metaservice",))]


def test_steps_of_many_jobs_taken_together_share_each_statement(api: httpx.Client, database_url: str) -> None:
    """Ten jobs asking `next` at once: one allocation, one gather and one write serve them all, and their commits
    one more write; every job got its own barrier planned and stored."""
    jobs = [(f"j{i}", f"lake.raw.r{i}", f"lake.mart.s{i}") for i in range(10)]
    for job, root, sink in jobs:
        _register(api, job, [root], [sink])

    async def steps(db: Runtime) -> tuple[list[int], list[float], dict[str, int]]:
        async def step(job: str, root: str, sink: str) -> tuple[int, float]:
            tally, token = statements.start()
            try:
                decision = await barriers.next_barrier(db, job_id=job, root_snapshots={root: 1}, min_interval=0.0)
                assert decision.action == "process" and decision.barrier is not None, decision
                await barriers.commit_barrier(db, job_id=job, barrier=decision.barrier, snapshots={sink: 1})
                return decision.barrier, tally.statements
            finally:
                statements.stop(token)

        done = await asyncio.gather(*(step(*job) for job in jobs))
        calls = {"allocations": db.allocator.calls, "gathers": db.gathers.calls, "writes": db.writes.calls}
        return [b for b, _ in done], [s for _, s in done], calls

    handed, tallies, calls = _run_with_db(database_url, steps)
    assert len(set(handed)) == 1, "one barrier sealed every root reported together"
    assert calls == {"allocations": 1, "gathers": 1, "writes": 2}
    assert tallies == [pytest.approx(0.4)] * 10  # a tenth of each of the four statements
    for job, _, sink in jobs:
        run = api.get(f"/jobs/{job}/barriers").json()["runs"][0]
        assert (run["barrier"], run["status"], run["outputs"]) == (handed[0], "committed", {sink: 1})


def test_racing_steps_of_one_job_on_one_process_never_share_a_write(api: httpx.Client, database_url: str) -> None:
    """Two `next` of one job at once plan on the same version; in one statement both would pass the version check.
    The second waits for the next statement, loses the compare-and-set, plans again and answers the same barrier.
    Then two identical commits at once: one stores, the other finds it committed and answers the same."""
    _register(api, "solo", [R1], [OUT])

    async def race(db: Runtime) -> tuple[list[Any], list[Any]]:
        nexts = await asyncio.gather(
            *(barriers.next_barrier(db, job_id="solo", root_snapshots={R1: 1}, min_interval=0.0) for _ in range(2))
        )
        barrier = nexts[0].barrier
        assert barrier is not None
        commits = await asyncio.gather(
            *(barriers.commit_barrier(db, job_id="solo", barrier=barrier, snapshots={OUT: 7}) for _ in range(2))
        )
        return list(nexts), list(commits)

    nexts, commits = _run_with_db(database_url, race)
    assert nexts[0] == nexts[1] and nexts[0].action == "process"
    assert commits[0] == commits[1]
    runs = api.get("/jobs/solo/barriers").json()["runs"]
    assert [(r["barrier"], r["status"], r["outputs"]) for r in runs] == [(nexts[0].barrier, "committed", {OUT: 7})]


def test_a_step_whose_deadline_passes_answers_504_once_its_write_was_sent_and_503_before(database_url: str) -> None:
    """A step waiting for a coalesced write: if the statement carrying its request was sent, the outcome is unknown
    (504); if its request was still queued behind another statement, nothing happened (503). The first statement
    is held until both steps have answered, so the order is certain."""

    async def main(steps_db: Database, coalescer_db: Database) -> tuple[BaseException | None, BaseException | None]:
        release = asyncio.Event()

        async def held(_conn: Connection, requests: Sequence[int]) -> list[int]:
            await release.wait()
            return list(requests)

        coalescer: Coalescer[int, int] = Coalescer(coalescer_db, held, name="test", writes=True)

        first_sent = asyncio.Event()

        async def step(n: int) -> BaseException | None:
            async def work(unit: Unit) -> int:
                def sending() -> None:
                    unit.mark_sent()
                    first_sent.set()

                return await coalescer.submit(n, on_send=sending)

            try:
                await in_autocommit(steps_db, work, connected=False)
            except (OutcomeUnknown, Unavailable) as error:
                return error
            return None

        try:
            first = asyncio.ensure_future(step(1))
            with anyio.fail_after(30):
                await first_sent.wait()  # its statement is in flight, held
            second = await step(2)  # queued behind the held statement until its own deadline
            return await first, second
        finally:
            release.set()
            await coalescer.close()

    async def run() -> tuple[BaseException | None, BaseException | None]:
        steps_db = Database(Settings(database_url=database_url, transaction_deadline_seconds=1.0))
        coalescer_db = Database(Settings(database_url=database_url, transaction_deadline_seconds=60.0))
        await steps_db.open()
        await coalescer_db.open()
        try:
            return await main(steps_db, coalescer_db)
        finally:
            await steps_db.close()
            await coalescer_db.close()

    sent, queued = anyio.run(run)
    assert isinstance(sent, OutcomeUnknown), sent
    assert isinstance(queued, Unavailable) and not isinstance(queued, OutcomeUnknown), queued


def test_token_lookups_of_concurrent_requests_share_a_statement_and_each_gets_its_own(database_url: str) -> None:
    """With auth on every request looks its token up; lookups that arrive together share one statement, and each
    is answered for its own token (an unknown and a revoked one among them). A revocation holds for the next
    lookup."""
    names = {"ops": f"ops-{uuid.uuid4().hex}", "runner": f"runner-{uuid.uuid4().hex}", "old": f"old-{uuid.uuid4().hex}"}

    async def lookups(db: Runtime) -> tuple[list[str | None], int, str | None]:
        secrets = {}
        for key, role, jobs in (("ops", "admin", []), ("runner", "job", ["enrich"]), ("old", "reader", [])):
            secrets[key], _ = await tokens.create_token(db.database, name=names[key], role=role, job_patterns=jobs)  # type: ignore[arg-type]
        await tokens.revoke_token(db.database, name=names["old"])
        presented = [secrets["runner"], "ms_unknown", secrets["ops"], secrets["old"], secrets["runner"]]
        found = await asyncio.gather(*(tokens.authenticate(db, token=t) for t in presented))
        calls = db.tokens.calls
        await tokens.revoke_token(db.database, name=names["runner"])
        again = await tokens.authenticate(db, token=secrets["runner"])
        return [p.name if p else None for p in found], calls, again.name if again else None

    try:
        found, calls, after_revoke = _run_with_db(database_url, lookups)
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("DELETE FROM api_tokens WHERE name = ANY(%s)", [list(names.values())])
    assert found == [names["runner"], None, names["ops"], None, names["runner"]]
    assert calls == 1
    assert after_revoke is None
