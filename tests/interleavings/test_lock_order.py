"""A lineage change on one server and a barrier allocation on another never deadlock (docs/design.md, "Lock order").

Every transaction that takes the barrier clock takes it last: the tables rows it will write or reference (a
foreign key check's KEY SHARE included) are locked before it, in id order, as `metaservice_issue_barriers` locks
the rows it reports and the seal candidates before the clock. The interleavings that deadlocked, made exact by a
pause point and by what PostgreSQL reports (pg_stat_activity), not by timing:

- a change of job J's lineage (unregistering J, or a new source of J) holds the clock in share mode; an allocation
  on the other server locks J's sink S (a seal candidate since a rollback of S) and queues for the clock; the
  change aborts J's in-flight barrier, whose `aborted` range of S checks S's row (the foreign key), which the
  allocation holds: each waited for the other, and the allocation was answered 503 (`DeadlockDetected` in
  `metaservice_issue_barriers`, the checker's soak of issue 32);
- a job's lineage registered in one transaction locked each table as it came to it, the second after the first
  edge had taken the clock: an allocation holding the second table (a seal candidate) and queued for the clock
  deadlocked with it.
"""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from tests import support
from tests.interleavings.harness import Servers, ok, path

R, S, X, Y = "lake.raw.r", "lake.mid.s", "lake.raw.x", "lake.raw.y"
ALLOCATION_WAITS = """
    SELECT count(*) FROM pg_stat_activity
     WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%metaservice_issue_barriers%'
"""


def allocation_waits_for_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(ALLOCATION_WAITS).fetchone()
    return bool(row and row[0])


def seal_candidate(url: str, table: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT seal_candidate FROM tables WHERE name = %s", [table]).fetchone()
    return bool(row and row[0])


def in_flight_with_marked_sink(servers: Servers) -> int:
    """J reads R and writes S, with a barrier in flight, while S is a seal candidate: a rollback of S marked it, and
    no barrier was issued since (the checker's rollbacks leave their scope so until the next barrier)."""
    api = servers.a
    ok(api.post(f"/register/source/J/{path(R)}"), 201)
    ok(api.post(f"/register/sink/J/{path(S)}"), 201)
    b1 = ok(api.post("/barriers", json={"root_snapshots": {R: 1}}), 201)["barrier"]
    ok(api.post(f"/jobs/J/barriers/{process(api, b1)}/commit", json={"snapshots": {S: 10}}))
    b2: int = ok(api.post("/barriers", json={"root_snapshots": {R: 2}}), 201)["barrier"]
    ok(api.post(f"/jobs/J/barriers/{process(api, b2)}/commit", json={"snapshots": {S: 11}}))
    plan = ok(api.post("/rollbacks", json={"table": S, "barrier": b1}), 201)
    ok(api.post(f"/rollbacks/{plan['rollback_id']}/complete", json={}))
    assert process(api, b2) == b2  # J processes b2 again: in flight, and no barrier was issued
    assert seal_candidate(servers.database_url, S)
    return b2


def process(api: httpx.Client, expected: int) -> int:
    decision: dict[str, Any] = ok(api.post("/jobs/J/barriers/next", json={"root_snapshots": {}}))
    assert decision["action"] == "process" and decision["barrier"] == expected, decision
    barrier: int = decision["barrier"]
    return barrier


def allocate_while_the_clock_is_shared(servers: Servers, change: Any, allocation: Any) -> tuple[Any, Any]:
    """Run `change` (server B) up to where it holds the clock in share mode, start `allocation` (server A) and wait
    until PostgreSQL reports it waiting for a lock, then let the change go on; both responses."""
    servers.pause.arm("lineage_clock_held")
    changing = servers.in_background(change)
    servers.pause.wait_arrived("lineage_clock_held")
    allocating = servers.in_background(allocation)
    support.wait_until(
        lambda: allocation_waits_for_a_lock(servers.database_url), timeout=30, what="the allocation to wait for a lock"
    )
    servers.pause.release("lineage_clock_held")
    return changing.result(), allocating.result()


@pytest.mark.parametrize(
    ("name", "method", "url"),
    [("unregister", "POST", "/unregister/J"), ("new source", "POST", f"/register/source/J/{path(X)}")],
)
def test_a_lineage_change_aborting_a_barrier_does_not_deadlock_with_an_allocation_locking_the_sink(
    servers: Servers, name: str, method: str, url: str
) -> None:
    b2 = in_flight_with_marked_sink(servers)
    if name == "new source":
        ok(servers.a.post(f"/register/source/K/{path(X)}"), 201)  # X exists: the change locks it, creates nothing

    changed, allocated = allocate_while_the_clock_is_shared(
        servers,
        lambda: servers.b.request(method, url),
        lambda: servers.a.post("/barriers", json={"root_snapshots": {R: 3}}),
    )

    assert changed.status_code in (200, 201), changed.text
    assert allocated.status_code == 201, allocated.text  # was 503: DeadlockDetected in metaservice_issue_barriers
    assert allocated.json()["barrier"] > b2
    runs = ok(servers.a.get("/jobs/J/barriers"))
    assert any(r["barrier"] == b2 and r["status"] == "aborted" for r in runs["runs"]), runs


def test_a_job_registered_in_one_transaction_locks_its_tables_before_the_clock(servers: Servers) -> None:
    api = servers.a
    ok(api.post(f"/register/source/K/{path(R)}"), 201)
    ok(api.post(f"/register/source/K/{path(Y)}"), 201)
    ok(api.post("/barriers", json={"root_snapshots": {R: 1}}), 201)
    ok(api.post(f"/register/source/L/{path(X)}"), 201)  # X is new: a seal candidate until the next barrier
    assert seal_candidate(servers.database_url, X)
    body = {"sources": [{"table": Y}], "sinks": [{"table": X}]}

    changed, allocated = allocate_while_the_clock_is_shared(
        servers,
        lambda: servers.b.post("/register/J", json=body),
        lambda: servers.a.post("/barriers", json={"root_snapshots": {R: 2}}),
    )

    assert changed.status_code == 201, changed.text
    assert allocated.status_code == 201, allocated.text  # was 503: DeadlockDetected in metaservice_issue_barriers


# The protocol's write statement (repositories/protocol.py; pg_stat_activity keeps only the start of its text).
WRITE_WAITS = """
    SELECT count(*) FROM pg_stat_activity
     WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%WITH expect AS%'
"""


def commit_waits_for_a_sink(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(WRITE_WAITS).fetchone()
    return bool(row and row[0])


def test_a_commit_updates_its_sinks_in_the_order_an_allocation_locks_them(servers: Servers) -> None:
    """J writes A and B (B the older table, A first by name), both seal candidates after a rollback. An allocation
    locks B and then A, by id; J's commit raises each sink's newest snapshot. A third session holds B, so that the
    allocation queues for B first and the commit behind it; once B is free, the allocation takes B and needs A:
    a commit that had taken A first (its plan's order, by name) would wait for B while holding A (was: one of the
    two answered 503, DeadlockDetected)."""
    api, url = servers.a, servers.database_url
    a, b = "lake.mid.a", "lake.mid.b"
    ok(api.post(f"/register/source/J/{path(R)}"), 201)
    ok(api.post(f"/register/sink/J/{path(b)}"), 201)
    ok(api.post(f"/register/sink/J/{path(a)}"), 201)
    b1 = ok(api.post("/barriers", json={"root_snapshots": {R: 1}}), 201)["barrier"]
    ok(api.post(f"/jobs/J/barriers/{process(api, b1)}/commit", json={"snapshots": {a: 10, b: 20}}))
    b2: int = ok(api.post("/barriers", json={"root_snapshots": {R: 2}}), 201)["barrier"]
    ok(api.post(f"/jobs/J/barriers/{process(api, b2)}/commit", json={"snapshots": {a: 11, b: 21}}))
    plan = ok(api.post("/rollbacks", json={"table": a, "barrier": b1}), 201)
    ok(api.post(f"/rollbacks/{plan['rollback_id']}/complete", json={}))
    assert process(servers.b, b2) == b2  # in flight again, on server B (whose write statement commits it)
    assert seal_candidate(url, a) and seal_candidate(url, b)

    with psycopg.connect(url) as holder:
        holder.execute("SELECT 1 FROM tables WHERE name = %s FOR NO KEY UPDATE", [b])
        allocating = servers.in_background(lambda: api.post("/barriers", json={"root_snapshots": {R: 3}}))
        support.wait_until(lambda: allocation_waits_for_a_lock(url), timeout=30, what="the allocation to wait for B")
        committing = servers.in_background(
            lambda: servers.b.post(f"/jobs/J/barriers/{b2}/commit", json={"snapshots": {a: 12, b: 22}})
        )
        support.wait_until(lambda: commit_waits_for_a_sink(url), timeout=30, what="the commit to wait for a sink")
        holder.commit()

    allocated, committed = allocating.result(), committing.result()
    assert allocated.status_code == 201, allocated.text
    assert committed.status_code == 200, committed.text
