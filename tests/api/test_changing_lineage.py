"""Issue 12, cases 1-7: consistency when pipelines change, over HTTP against the real server.

Each test replays a sequence of the issue as written there (bN = the Nth barrier issued, "report" =
`POST /tables/…/snapshots`, "issue" = `POST /barriers`) and asserts what docs/design.md "Rules for a changing
lineage" say must happen instead. Case 8 (the client across an abort) lives with the Spark tests.

Every answer goes through `tests.model.wire.Wire`: no 5xx, every 4xx a problem document with a `code`, and
each call names the outcomes it accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from metaservice.repositories import versions as version_rows
from tests.support import table_path
from tests.support.pipelines import Flow

R, R1, R2, S = "lake.raw.r", "lake.raw.r1", "lake.raw.r2", "lake.raw.s"
X, X1, X2, Y, Z, W, T = (
    "lake.mart.x",
    "lake.mart.x1",
    "lake.mart.x2",
    "lake.mart.y",
    "lake.mart.z",
    "lake.mart.w",
    "lake.mart.t",
)


@pytest.fixture(name="flow")
def fx_flow(api: httpx.Client) -> Flow:
    return Flow(api)


def inputs(**snapshots: tuple[int, int | None]) -> dict[str, dict[str, int | None]]:
    """`inputs(r=(2, 1))` → {"lake.raw.r": {"snapshot_id": 2, "previous_snapshot_id": 1}} (names from this module)."""
    names = {"r": R, "r1": R1, "r2": R2, "x1": X1, "x2": X2}
    return {names[k]: {"snapshot_id": v[0], "previous_snapshot_id": v[1]} for k, v in snapshots.items()}


# --- case 1: writer hand-over, revival, a root that gets a writer ---------------------------------------------------


def test_case_1_a_new_writer_of_a_table_with_history_starts_after_it_and_can_commit_abort_and_leave(
    flow: Flow,
) -> None:
    flow.register("J", sources=[R], sinks=[X])
    flow.report(R, 1)
    b1 = flow.issue()
    assert flow.run("J", {X: 10}) == b1
    flow.unregister("J")
    flow.register("K", sources=[R], sinks=[X])

    handed = flow.process("K")  # rule 3: after X's history (b1); rule 6: the hand-over needs a barrier
    assert handed["barrier"] > b1, handed
    assert flow.barriers() == [handed["barrier"], b1]  # no barrier was issued since b1: `next` issued one
    assert handed["inputs"] == inputs(r=(1, None))
    assert handed["sinks"] == {X: {"previous_snapshot_id": 10}}
    flow.commit("K", handed["barrier"], {X: 11})
    assert flow.weak([R, X]) == {"barrier": handed["barrier"], "versions": {R: 1, X: 11}}

    later = flow.process("K", {R: 2})
    assert later["barrier"] > handed["barrier"] and later["inputs"] == inputs(r=(2, 1))
    flow.abort("K", later["barrier"])
    flow.unregister("K")


def test_case_1_a_revived_writer_processes_the_next_barrier_and_reads_stay_where_the_table_was_built(
    flow: Flow,
) -> None:
    flow.register("J", sources=[R], sinks=[X])
    flow.report(R, 1)
    b1 = flow.issue()
    assert flow.run("J", {X: 10}) == b1
    flow.unregister("J")
    flow.report(R, 2)
    b2 = flow.issue()
    flow.register("J", sources=[R], sinks=[X])

    built_together = {"barrier": b1, "versions": {R: 1, X: 10}}  # X=10 was built from R=1, never from R=2
    assert flow.weak([R, X]) == built_together
    revived = flow.process("J")
    assert (revived["barrier"], revived["inputs"]) == (b2, inputs(r=(2, 1)))
    assert flow.weak([R, X]) == built_together  # still, while b2 is in flight
    flow.commit("J", b2, {X: 11})
    assert flow.weak([R, X]) == {"barrier": b2, "versions": {R: 2, X: 11}}


def test_case_1_a_root_that_gets_a_writer_lets_its_first_barrier_be_committed_and_a_later_one_aborted(
    flow: Flow,
) -> None:
    flow.register("dashboard", sources=[R, Y])  # R and Y are roots; Y holds data written outside MetaService
    flow.report(R, 1)
    flow.report(Y, 7)
    b1 = flow.issue()
    flow.register("N", sources=[R], sinks=[Y])

    first = flow.process("N")
    assert first["barrier"] > b1, first  # after Y's seals, which stop at b1
    assert flow.barriers() == [first["barrier"], b1]  # issued by that `next` (rule 6)
    assert first["inputs"] == inputs(r=(1, None))
    flow.commit("N", first["barrier"], {Y: 8})
    assert flow.weak([Y]) == {"barrier": first["barrier"], "versions": {Y: 8}}

    later = flow.process("N", {R: 2})
    assert later["barrier"] > first["barrier"]
    flow.abort("N", later["barrier"])
    flow.unregister("N")


# --- case 2: a source added to a running job -------------------------------------------------------------------------


def test_case_2_a_job_that_gains_a_source_processes_the_next_barrier_with_it(flow: Flow) -> None:
    flow.register("J", sources=[R1], sinks=[X])
    flow.register("other", sources=[R2])  # R2 is registered and holds data before J reads it
    flow.report(R1, 1)
    flow.report(R2, 5)
    b1 = flow.issue()
    assert flow.run("J", {X: 10}) == b1
    before_the_change = {"barrier": b1, "versions": {R1: 1, R2: 5, X: 10}}
    assert flow.weak([R1, R2, X]) == before_the_change

    flow.register("J", sources=[R2])
    b2 = flow.issue()
    subsets = [[R1, R2, X], [R2, X]]
    assert flow.answers_pairing(X, 10, after=b1, subsets=subsets) == []  # X=10 never read R2
    assert flow.weak([R1, R2, X]) == before_the_change
    added = flow.process("J")
    assert (added["barrier"], added["inputs"]) == (b2, inputs(r1=(1, 1), r2=(5, None)))
    assert flow.answers_pairing(X, 10, after=b1, subsets=subsets) == []
    assert flow.weak([R1, R2, X]) == before_the_change
    flow.commit("J", b2, {X: 11})
    assert flow.weak([R1, R2, X]) == {"barrier": b2, "versions": {R1: 1, R2: 5, X: 11}}


def test_case_2_a_job_whose_added_source_has_no_data_yet_waits_and_processes_once_it_has(flow: Flow) -> None:
    flow.register("J", sources=[R1], sinks=[X])
    flow.report(R1, 1)
    b1 = flow.issue()
    assert flow.run("J", {X: 10}) == b1
    flow.register("J", sources=[R2])  # R2 has no snapshot yet

    issued, waits = [], []
    for _ in range(3):
        issued.append(flow.issue())
        decision = flow.next("J")
        assert decision["action"] in ("wait", "idle"), decision  # never `process` without R2, never a 4xx
        waits += [decision] if decision["action"] == "wait" else []
    flow.report(R2, 5)
    sealing = flow.issue()

    processed = flow.process("J")  # no wait forever
    assert (processed["barrier"], processed["inputs"]) == (sealing, inputs(r1=(1, 1), r2=(5, None)))
    assert set(processed["skipped"]) <= set(issued)  # earlier barriers were skipped or never offered
    flow.commit("J", sealing, {X: 11})
    assert flow.weak([R1, R2, X]) == {"barrier": sealing, "versions": {R1: 1, R2: 5, X: 11}}
    assert flow.next("J")["action"] == "idle"
    assert all(R2 in wait.get("waiting_for", ()) for wait in waits), waits  # a wait names what it waits for


# --- case 3: a sink added where the table already holds data ---------------------------------------------------------


def test_case_3_a_sink_added_to_a_running_job_is_written_by_it_and_never_shows_the_roots_data_as_its_output(
    flow: Flow,
) -> None:
    flow.register("J", sources=[R], sinks=[X])
    flow.register("dashboard", sources=[Y])  # Y is a root holding snapshot 7
    flow.report(R, 1)
    flow.report(Y, 7)
    b1 = flow.issue()
    assert flow.run("J", {X: 10}) == b1
    flow.register("J", sinks=[Y])
    b2 = flow.issue()

    added = flow.process("J")
    assert added["barrier"] == b2, added  # not `idle`: the job's sinks changed (rule 4)
    assert set(added["sinks"]) == {X, Y} and added["inputs"] == inputs(r=(1, 1))
    subsets = [[Y], [X, Y], [R, Y], [R, X, Y]]
    assert flow.answers_pairing(Y, 7, after=b2 - 1, subsets=subsets) == []  # Y=7 is not J's output at b2
    single = flow.wire.get(f"/version/weak/{table_path(Y)}", expect=(200, "no_consistent_version"))
    assert single.status != 200 or single.json()["barrier"] < b2, single.body

    flow.commit("J", b2, {X: 11, Y: 8})
    assert flow.weak([Y]) == {"barrier": b2, "versions": {Y: 8}}
    assert flow.weak([R, X, Y]) == {"barrier": b2, "versions": {R: 1, X: 11, Y: 8}}
    assert flow.answers_pairing(Y, 7, after=b2 - 1, subsets=subsets) == []


# --- case 4: one abort skips exactly that barrier --------------------------------------------------------------------


def test_case_4_after_an_abort_the_next_barrier_with_the_data_is_processed(flow: Flow) -> None:
    flow.register("J", sources=[R], sinks=[X])
    flow.register("K", sources=[R], sinks=[Y])
    flow.report(R, 1)
    b1 = flow.issue()
    assert flow.run("J", {X: 10}) == b1
    assert flow.run("K", {Y: 20}) == b1
    flow.report(R, 2)
    b2 = flow.issue()
    assert flow.process("J")["barrier"] == b2
    flow.abort("J", b2)
    assert flow.run("K", {Y: 21}) == b2
    b3, _, b5 = flow.issue(), flow.issue(), flow.issue()  # R unchanged

    retried = flow.process("J")
    assert (retried["barrier"], retried["inputs"]) == (b3, inputs(r=(2, 1)))
    flow.commit("J", b3, {X: 11})
    never = [(r["first_barrier"], r["last_barrier"]) for r in flow.ranges(X) if r["snapshot_id"] is None]
    assert never == [(b2, b2)]  # only b2 is aborted in X

    assert flow.next("J")["action"] == "idle"
    assert flow.next("K")["action"] == "idle"
    assert flow.strong([Y]) == b5
    assert flow.weak([R, X, Y]) == {"barrier": b5, "versions": {R: 2, X: 11, Y: 21}}


# --- case 5: strong never goes back without a rollback ---------------------------------------------------------------


def assert_never_goes_back(answers: list[int | None]) -> None:
    """Strong answers in the order they were given: no 404 after the first answer, and never an older barrier."""
    first = next((i for i, a in enumerate(answers) if a is not None), len(answers))
    given = [a for a in answers[first:] if a is not None]
    assert len(given) == len(answers) - first, f"strong answered nothing after answering: {answers}"
    assert given == sorted(given), f"strong went back in time: {answers}"


def test_case_5_registering_a_reader_of_a_lagging_table_does_not_move_strong_back(flow: Flow) -> None:
    flow.register("J1", sources=[R1], sinks=[X1])
    flow.register("J2", sources=[R2], sinks=[X2])
    flow.report(R1, 1)
    flow.report(R2, 1)
    b1 = flow.issue()
    assert flow.run("J1", {X1: 10}) == flow.run("J2", {X2: 20}) == b1
    flow.run("J1", {X1: 11}, roots={R1: 2})
    b3 = flow.run("J1", {X1: 12}, roots={R1: 3})
    answers = [flow.strong([X1])]
    assert answers == [b3]

    flow.register("N", sources=[X1, X2])  # X2 completed only b1; N never runs
    answers.append(flow.strong([X1]))
    flow.run("J1", {X1: 13}, roots={R1: 4})
    answers.append(flow.strong([X1]))
    flow.issue()
    assert flow.next("J1")["action"] == "idle"
    answers.append(flow.strong([X1]))
    assert all(a is not None and a >= b3 for a in answers), answers
    assert_never_goes_back(answers)


def test_case_5_a_late_commit_of_a_new_job_does_not_move_strong_back(flow: Flow) -> None:
    flow.register("J", sources=[R], sinks=[X])
    flow.report(R, 1)
    b1 = flow.issue()
    assert flow.run("J", {X: 10}) == b1
    answers = [flow.strong([X])]
    assert answers == [b1]

    flow.register("M", sources=[R], sinks=[W])
    late = flow.process("M")  # the new job's first barrier stays in flight while the others move on
    assert late["barrier"] >= b1
    answers.append(flow.strong([X]))
    for snapshot in (2, 3):
        flow.run("J", {X: 8 + snapshot}, roots={R: snapshot})
        answers.append(flow.strong([X]))
    flow.commit("M", late["barrier"], {W: 1})
    answers.append(flow.strong([X]))
    for snapshot in range(2, 10):  # M catches up
        decision = flow.next("M")
        if decision["action"] != "process":
            break
        flow.commit("M", decision["barrier"], {W: snapshot})
        answers.append(flow.strong([X]))
    assert decision["action"] == "idle", decision
    assert_never_goes_back(answers)
    assert flow.strong([X]) == flow.barriers()[0]


# --- case 6: a job with a sink and no sources ------------------------------------------------------------------------


def test_case_6_an_ingestion_job_without_sources_processes_barriers_and_its_table_is_readable(flow: Flow) -> None:
    flow.register("ingest", sinks=[T])

    first = flow.process("ingest")  # rule 6: its first barrier is issued by this call
    assert flow.barriers() == [first["barrier"]]
    assert first["inputs"] == {} and first["sinks"] == {T: {"previous_snapshot_id": None}}
    flow.commit("ingest", first["barrier"], {T: 1})
    assert flow.weak([T]) == {"barrier": first["barrier"], "versions": {T: 1}}
    assert flow.strong([T]) == first["barrier"]
    reported = flow.wire.post(f"/tables/{table_path(T)}/snapshots", {"snapshot_id": 2}, expect=("not_root",))
    assert reported.json()["writer"] == "ingest"
    assert flow.next("ingest")["action"] == "idle"

    flow.issue()
    newest = flow.issue()
    again = flow.process("ingest")  # rule 8: the newest barrier after its last one
    assert again["barrier"] == newest
    flow.commit("ingest", newest, {T: 2})
    assert flow.next("ingest")["action"] == "idle"
    assert flow.weak([T]) == {"barrier": newest, "versions": {T: 2}}


# --- case 7: an answer of 4xx means nothing happened -----------------------------------------------------------------


def test_case_7_a_next_answered_with_an_error_reports_nothing_and_issues_no_barrier(flow: Flow) -> None:
    flow.register("J", sources=[R], sinks=[X])
    flow.register("other", sources=[S])  # S: a registered root that J does not read
    flow.register("writer", sources=[R], sinks=[Z])  # Z: a table a job writes
    flow.register("gone", sources=[R], sinks=[W])
    flow.unregister("gone")
    flow.report(R, 1)
    flow.report(S, 1)
    b1 = flow.issue()
    assert flow.run("J", {X: 10}) == b1

    refused = [
        ("J", {R: 2, "lake.raw.unknown": 1}, 404, "not_found"),
        ("J", {R: 2, Z: 5}, 409, "not_root"),
        ("gone", {R: 2}, 409, "job_unregistered"),
        ("J", {R: 2, S: 2}, 422, "invalid_request"),
    ]
    for job, roots, status, code in refused:
        answer = flow.wire.post(f"/jobs/{job}/barriers/next", {"root_snapshots": roots}, expect=(status,))
        assert answer.code == code, (job, roots, answer.body)
        assert flow.barriers() == [b1], (job, roots, "a refused next issued a barrier")
        latest = {name: flow.table(name)["latest_snapshot_id"] for name in (R, S)}
        assert latest == {R: 1, S: 1}, (job, roots, "a refused next applied its root snapshots")
        assert flow.job("J")["in_flight_barrier"] is None


def test_case_7_a_next_may_report_only_what_its_job_reads_now_while_the_lineage_changes(flow: Flow) -> None:
    """`next` sends its root report in the allocation call, which checks it against the job's current edges: a
    source dropped, a source gained, a root handed to a writer, a job retired and revived. A refused report
    records nothing and issues nothing; an accepted one is sealed and processed at once."""
    flow.register("J", sources=[R1], sinks=[X])
    flow.register("other", sources=[R2])
    b1 = flow.run("J", {X: 10}, {R1: 1})

    def refused(job: str, roots: Mapping[str, int], status: int, code: str) -> dict[str, Any]:
        before = (flow.barriers(), {t: flow.table(t)["latest_snapshot_id"] for t in (R1, R2)})
        answer = flow.wire.post(f"/jobs/{job}/barriers/next", {"root_snapshots": dict(roots)}, expect=(status,))
        assert answer.code == code, answer.body
        after = (flow.barriers(), {t: flow.table(t)["latest_snapshot_id"] for t in (R1, R2)})
        assert after == before, "a refused next changed something"
        return answer.json()

    flow.register("J", sources=[R2])
    flow.wire.delete(f"/register/source/J/{table_path(R1)}", expect=(200,))
    assert refused("J", {R1: 2}, 422, "invalid_request")["tables"] == [R1]  # a source no more
    gained = flow.process("J", {R2: 7})
    assert gained["barrier"] > b1 and gained["inputs"] == inputs(r2=(7, None))
    assert flow.table(R2)["latest_snapshot_id"] == 7
    flow.commit("J", gained["barrier"], {X: 11})

    flow.register("K", sinks=[R2])  # R2 is written by a job now: no one reports it
    body = refused("J", {R2: 8}, 409, "not_root")
    assert (body["table"], body["writer"]) == (R2, "K")

    flow.unregister("J")
    refused("J", {R2: 8}, 409, "job_unregistered")
    flow.register("J", sources=[R1], sinks=[X])
    revived = flow.process("J", {R1: 3})
    assert revived["barrier"] > gained["barrier"] and revived["inputs"][R1]["snapshot_id"] == 3
    assert flow.table(R1)["latest_snapshot_id"] == 3


def test_case_7_a_commit_answered_with_an_error_leaves_the_barrier_in_flight_and_the_sink_unchanged(
    flow: Flow,
) -> None:
    flow.register("J", sources=[R], sinks=[X])
    flow.register("writer", sources=[R], sinks=[Z])
    flow.report(R, 1)
    assert flow.run("J", {X: 10}) > 0
    barrier = flow.process("J", {R: 2})["barrier"]
    ranges = flow.ranges(X)

    for wrong in ({X: 11, Z: 3}, {}, {Z: 3}):
        url = f"/jobs/J/barriers/{barrier}/commit"
        answer = flow.wire.post(url, {"snapshots": wrong}, expect=(422,))
        assert answer.code == "invalid_request", answer.body
        assert flow.job("J")["in_flight_barrier"] == barrier
        assert flow.ranges(X) == ranges
    flow.commit("J", barrier, {X: 11})
    assert flow.weak([X]) == {"barrier": barrier, "versions": {X: 11}}


def test_a_sink_that_never_completes_barriers_another_writer_settled_shows_them_as_a_gap(flow: Flow) -> None:
    """Rule 3 with two sinks: K takes X over after X's history reached b2 while K's own Y stopped at b1, so Y never
    completes b2 (a `gap`); the table's history lists it (it answered 500 before `gap` was a documented kind)."""
    flow.register("J", sources=[R], sinks=[X])
    flow.register("K", sources=[R], sinks=[Y])
    flow.report(R, 1)
    b1 = flow.issue()
    assert flow.run("J", {X: 10}) == b1
    assert flow.run("K", {Y: 20}) == b1
    flow.report(R, 2)
    b2 = flow.issue()
    assert flow.run("J", {X: 11}) == b2
    flow.unregister("J")
    flow.register("K", sources=[R], sinks=[X, Y])
    handed = flow.process("K")
    assert handed["barrier"] > b2
    ranges = {(r["first_barrier"], r["how"]) for r in flow.ranges(Y)}
    assert (b2, "gap") in ranges, ranges


def test_a_strong_read_finds_its_version_behind_hundreds_of_lineage_changes(flow: Flow) -> None:
    """A table whose job does not run keeps strong reads of its component at the barrier it completed, however
    many lineage changes came since. Each change in the component is one step back for the read; a 600 s run of
    the concurrent checker made ~800 changes, and a read that ran out of steps answered 404 as if nothing had been
    complete (now: changes elsewhere cost no step, the budget is 1,024 steps, and running out answers 503)."""
    r, s, a, b = "lake.raw.r", "lake.raw.s", "lake.mart.a", "lake.mart.b"
    flow.register("j1", sources=[r], sinks=[a])
    flow.register("j2", sources=[r], sinks=[b])
    b1 = flow.run("j1", {a: 10}, {r: 1})
    assert flow.run("j2", {b: 20}) == b1
    assert flow.run("j1", {a: 11}, {r: 2}) > b1  # j2 does not run again: b stays at b1, and so does strong a
    assert flow.strong([a]) == b1
    for _ in range(140):  # j1 reads s, then no longer, a barrier after each change: 280 changes, 280 steps
        flow.wire.post(f"/register/source/j1/{table_path(s)}", expect=(200, 201))
        flow.issue()
        flow.wire.delete(f"/register/source/j1/{table_path(s)}", expect=(200,))
        flow.issue()
    assert flow.strong([a]) == b1
    assert flow.strong([a, b]) == b1


def test_lineage_changes_in_another_component_cost_a_strong_read_no_step(flow: Flow, database_url: str) -> None:
    """The step back of a strong read stops at the newest change that can make its component another one, not at
    the newest change anywhere in the catalog."""
    r, a, x, y, z = "lake.raw.r", "lake.mart.a", "lake.raw.x1", "lake.mart.y", "lake.raw.z"
    flow.register("j1", sources=[r], sinks=[a])
    flow.register("other", sources=[x], sinks=[y])
    b1 = flow.run("j1", {a: 10}, {r: 1})
    for _ in range(3):
        flow.wire.post(f"/register/source/other/{table_path(z)}", expect=(200, 201))
        flow.issue()
        flow.wire.delete(f"/register/source/other/{table_path(z)}", expect=(200,))
        flow.issue()

    async def lower() -> int | None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            return (await version_rows.frontier(conn, names=[a], strong=True, bound=None)).lower

    newest_relevant = anyio.run(lower)
    assert newest_relevant is not None and newest_relevant < b1  # j1's registration, before b1
    assert flow.strong([a]) == flow.barriers()[0]  # j1 completes the later barriers idle (r did not change)
