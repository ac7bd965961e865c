"""The walk's model on its own: each check flags the reads issue 12 found and accepts the ones produced together.

Pure Python, no server: if one of these checks stopped flagging, the walk would pass against a broken server.
"""

from __future__ import annotations

from tests.model.model import InFlight, Model

R, R1, R2, X, Y, Z = "lake.raw.r", "lake.raw.r1", "lake.raw.r2", "lake.mart.x", "lake.mart.y", "lake.mart.z"
B1, B2, B3 = 100, 200, 300


def pipeline(model: Model, job: str, sources: list[str], sinks: list[str]) -> None:
    for table in sources:
        model.add_edge(job, table, "source")
    for table in sinks:
        model.add_edge(job, table, "sink")


def test_a_table_paired_with_another_snapshot_of_what_it_was_built_from_is_not_produced_together() -> None:
    model = Model()
    pipeline(model, "J", [R], [X])
    model.reported_snapshot(R, 1)
    model.head = B1
    model.committed("J", {R: 1}, {X: 10})
    model.reported_snapshot(R, 2)
    model.head = B2

    assert model.not_produced_together(B1, {R: 1, X: 10}) == []
    assert model.not_produced_together(B2, {R: 2, X: 10}) == [
        f"{X}=10 was built from {R}=1, not from {R}=2"
    ]  # issue 12 case 1 (revival): weak {R, X} answered b2 {R:2, X:10}


def test_two_outputs_built_from_different_snapshots_of_a_common_ancestor_are_not_produced_together() -> None:
    model = Model()
    pipeline(model, "J", [R], [X])
    pipeline(model, "K", [R], [Y])
    model.reported_snapshot(R, 1)
    model.committed("J", {R: 1}, {X: 10})
    model.reported_snapshot(R, 2)
    model.committed("K", {R: 2}, {Y: 20})
    model.committed("K", {R: 1}, {Y: 19})

    assert model.not_produced_together(B2, {X: 10, Y: 19}) == []
    problems = model.not_produced_together(B2, {X: 10, Y: 20})
    assert problems == [f"{X}=10 was built from {R}=1 but {Y}=20 from {R}=2"]


def test_a_source_added_before_a_barrier_must_be_in_what_the_job_wrote_for_it() -> None:
    model = Model()
    pipeline(model, "J", [R1], [X])
    pipeline(model, "other", [R2], [])
    model.reported_snapshot(R1, 1)
    model.reported_snapshot(R2, 5)
    model.head = B1
    model.committed("J", {R1: 1}, {X: 10})
    model.add_edge("J", R2, "source")  # takes effect at the first barrier after B1
    model.head = B2

    assert model.not_produced_together(B1, {R1: 1, R2: 5, X: 10}) == []  # before the change
    assert model.not_produced_together(B2, {R2: 5, X: 10}) == [
        f"{R2} is upstream of {X} at barrier {B2} (through edges registered before it), yet {X}=10 was built "
        f"without {R2}"
    ]  # issue 12 case 2: X=10 never read R2
    model.committed("J", {R1: 1, R2: 5}, {X: 11})
    assert model.not_produced_together(B2, {R1: 1, R2: 5, X: 11}) == []


def test_a_root_that_got_a_writer_is_not_that_writers_output_at_a_later_barrier() -> None:
    model = Model()
    pipeline(model, "J", [R], [X])
    model.tables.add(Y)
    model.reported_snapshot(R, 1)
    model.reported_snapshot(Y, 7)
    model.head = B1
    model.committed("J", {R: 1}, {X: 10})
    model.add_edge("J", Y, "sink")
    model.head = B2

    assert Y not in model.reported
    assert model.not_produced_together(B1, {R: 1, Y: 7}) == []
    assert model.not_produced_together(B2, {R: 1, Y: 7}) != []  # issue 12 case 3: Y=7 shown as J's output


def test_a_snapshot_nobody_wrote_is_flagged() -> None:
    model = Model()
    model.reported_snapshot(R, 1)
    assert model.not_produced_together(B1, {R: 2}) == [f"{R}=2 is no snapshot the walk ever reported or committed"]


def test_strong_may_not_go_back_or_answer_nothing_until_a_rollback_completes() -> None:
    model = Model()
    assert model.strong_went_back([X], None) is None
    assert model.strong_went_back([X], B2) is None
    assert model.strong_went_back([X, Y], B1) is None  # another set of tables has its own history
    assert model.strong_went_back([X], B1) == f"strong ['{X}'] answered barrier {B1} after barrier {B2}"
    assert model.strong_went_back([X], None) == f"strong ['{X}'] answered nothing after barrier {B2}"
    assert model.strong_went_back([X], B3) is None
    model.rolled_back({X: 10}, jobs=[])
    assert model.strong_went_back([X], B1) is None


def test_registry_outcomes_follow_one_writer_per_table_no_cycles_and_idempotent_edges() -> None:
    model = Model()
    pipeline(model, "J", [R], [X])
    pipeline(model, "K", [X], [Y])
    assert model.expected_registration("J", R, "source") == {200}
    assert model.expected_registration("J", R, "sink") == {"cycle"}  # reads and writes one table
    assert model.expected_registration("K", X, "sink") == {"cycle"}  # K reads X
    assert model.expected_registration("other", X, "sink") == {"table_has_writer"}
    assert model.expected_registration("K", R, "sink") == {"cycle"}  # R → J → X → K → R
    assert model.expected_registration("J", Y, "source") == {"cycle"}  # J → X → K → Y → J
    assert model.expected_registration("K", Z, "sink") == {201}
    assert model.expected_registration("new", Y, "source") == {201}


def test_orphans_data_less_roots_and_what_they_feed_are_blocked_until_reported() -> None:
    model = Model()
    pipeline(model, "J", [R], [X])
    pipeline(model, "K", [X], [Y])
    model.reported_snapshot(R, 1)
    assert model.blocked() == set()
    model.unregister("J")  # X becomes an orphan (rule 2); K reads it
    assert model.blocked() == {X, Y}
    model.reported_snapshot(X, 11)  # an external writer reports it: a root again
    assert model.blocked() == set()
    model.add_edge("K", Z, "source")  # a root without data
    assert model.blocked() == {Z, Y}


def test_a_lineage_change_aborts_the_barrier_in_flight_and_a_no_op_keeps_it() -> None:
    model = Model()
    pipeline(model, "J", [R], [X])
    model.in_flight["J"] = InFlight(B1, {R: 1}, (B1, {}))
    model.known("J")  # re-registering an existing edge changes nothing
    assert "J" in model.in_flight
    model.remove_edge("J", X, "sink")
    assert "J" not in model.in_flight and model.aborted_by_change == {"J": B1}
    assert model.writer(X) is None and model.root_snapshots("J") == {}
