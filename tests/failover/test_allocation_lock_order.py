"""Two servers' barrier allocations never deadlock each other: `metaservice_issue_barriers` takes every table row it
may touch (the tables it reports and the seal candidates, by id) before the clock.

The interleaving that deadlocked, forced by what PostgreSQL reports (pg_stat_activity), not by timing:
a third session holds the clock; allocation A (reporting table U, while table T is a seal candidate) queues for
the clock; allocation B (reporting T) queues behind it; the clock is released. A gets it and seals T, whose range
insert checks T's row, which B holds while it waits for the clock A now holds. With the lock order, A holds T
before it queues for the clock, so B waits for A instead, and both succeed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from metaservice.db import migrate
from tests import support

pytestmark = [pytest.mark.xdist_group("failover")]
CALL = "SELECT metaservice_issue_barriers(%s)"


@pytest.fixture(name="url")
def fx_url(admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ms_lock_order_{worker_id}"
    url = support.fresh_database(admin_url, name)
    migrate.upgrade(url)
    yield url
    support.drop_database(admin_url, name)


def waiting_for_a_lock(url: str, application: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
            (application,),
        ).fetchone()
    return bool(row and row[0])


def allocate(url: str, application: str, request: dict[str, Any], answers: dict[str, Any]) -> None:
    try:
        with psycopg.connect(url, autocommit=True, application_name=application) as conn:
            conn.execute("SET lock_timeout = '20s'")
            row = conn.execute(CALL, [Jsonb([request])]).fetchone()
            answers[application] = row[0] if row else None
    except psycopg.Error as exc:
        answers[application] = exc


def test_two_allocations_waiting_for_the_clock_do_not_deadlock(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tables (name) VALUES ('lake.raw.t'), ('lake.raw.u')")
        conn.execute(CALL, [Jsonb([{"kind": "report", "roots": {"lake.raw.t": 1}}])])  # T: an unsealed candidate
        marked = conn.execute("SELECT seal_candidate FROM tables WHERE name = 'lake.raw.t'").fetchone()
        assert marked == (True,)
    answers: dict[str, Any] = {}
    a = threading.Thread(
        target=allocate, args=(url, "alloc-a", {"kind": "barrier", "roots": {"lake.raw.u": 1}}, answers)
    )
    b = threading.Thread(
        target=allocate, args=(url, "alloc-b", {"kind": "report", "roots": {"lake.raw.t": 2}}, answers)
    )
    with psycopg.connect(url) as holder:  # a transaction holding the clock
        holder.execute("SELECT 1 FROM barrier_clock WHERE id = 1 FOR UPDATE")
        a.start()
        support.wait_until(lambda: waiting_for_a_lock(url, "alloc-a"), timeout=30, what="A to wait for the clock")
        b.start()
        support.wait_until(lambda: waiting_for_a_lock(url, "alloc-b"), timeout=30, what="B to wait behind A")
        holder.commit()
    a.join(timeout=60)
    b.join(timeout=60)
    for name in ("alloc-a", "alloc-b"):
        assert not isinstance(answers.get(name), Exception), f"{name}: {answers.get(name)!r}"
    (issued,) = answers["alloc-a"]
    assert issued["barrier"] is not None and issued["sealed"] == {"lake.raw.t": 1, "lake.raw.u": 1}


def test_a_foreign_key_check_on_a_row_an_allocation_holds_does_not_wait_for_it(url: str) -> None:
    """A transaction holding the clock in share mode (a lineage change) inserts a row referring to a table that an
    allocation queued for the clock holds: the foreign key check's KEY SHARE does not conflict with the
    allocation's FOR NO KEY UPDATE, so the insert goes on and the allocation gets the clock once it commits (with
    FOR UPDATE each waited for the other: DeadlockDetected, the allocation answered 503)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tables (name) VALUES ('lake.raw.t')")
        conn.execute("INSERT INTO jobs (name) VALUES ('j')")
    answers: dict[str, Any] = {}
    a = threading.Thread(
        target=allocate, args=(url, "alloc-a", {"kind": "report", "roots": {"lake.raw.t": 1}}, answers)
    )
    with psycopg.connect(url) as holder:  # a lineage change: the clock in share mode, then an edge to the table
        holder.execute("SET lock_timeout = '20s'")
        holder.execute("SELECT 1 FROM barrier_clock WHERE id = 1 FOR SHARE")
        a.start()
        support.wait_until(lambda: waiting_for_a_lock(url, "alloc-a"), timeout=30, what="A to wait for the clock")
        holder.execute(
            "INSERT INTO lineage_edges (job_id, table_id, role, added_after)"
            " SELECT j.id, t.id, 'source', 0 FROM jobs j, tables t WHERE j.name = 'j' AND t.name = 'lake.raw.t'"
        )
        holder.commit()
    a.join(timeout=60)
    assert not isinstance(answers.get("alloc-a"), Exception), f"alloc-a: {answers.get('alloc-a')!r}"
    (reported,) = answers["alloc-a"]
    assert reported["error"] is None and reported["latest"] == {"lake.raw.t": 1}
