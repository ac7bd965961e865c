"""The planner's knowledge of a table's history stays whole while a plan writes to it.

Found by `make soak` (seed 2477556812, step 5,599): a plan settled an upstream writer, which put a new range on
its sink after a stretch of barriers with no range; looking up one of those barriers then found it "unknown",
the step asked the database for ranges that only the plan held, and `next` answered 503 on every retry.
"""

from __future__ import annotations

from metaservice.domain.world import JobView, Range, TableView, World
from metaservice.services.planner import Planner


def _world() -> tuple[World, TableView, JobView]:
    newest = Range(1, 7, 10, 10, 5, "committed", 3)  # the table's newest range in the database: barrier 10 only
    table = TableView(7, "lake.m.t", 3, newest, (5, 3), 10, 10, None, 20, ranges={10: newest}, known=[(10, 10)])
    job = JobView(3, "writer", True, 10, 1, [], [7], None, None, None, None, 20)
    return World(40, 30, {3: job}, {7: table}), table, job


def test_a_range_a_plan_puts_after_a_stretch_makes_the_stretch_a_known_hole() -> None:
    world, table, job = _world()
    planner = Planner(world)
    planner._put(table, job, 30, 40, 6, "committed", follows=False)  # the unit under test
    assert table.covering(20) is None  # never completed at 20: a hole, not a question for the database
    assert table.covering(10) == Range(1, 7, 10, 10, 5, "committed", 3)
    assert table.covering(35) is table.newest
