"""`plan_sink`: how a job makes a sink agree with MetaService's baseline before writing (design rule 11).

Pure decisions over commit records; the Delta side (which records a table yields) is tested on real tables
in tests/spark/test_abort_exactly_once.py.
"""

from __future__ import annotations

import pytest

from spark_client import UnexpectedSinkCommit
from spark_client.catalog import CommitRecord
from spark_client.job import SinkPlan, plan_sink

JOB, T, B = "enrich", "lake.mart.x", 700


def plan(*records: CommitRecord, baseline: int | None = 4) -> SinkPlan:
    """`records` oldest first, as they were committed."""
    return plan_sink(list(reversed(records)), table=T, baseline=baseline, job_id=JOB, barrier=B)


def write(version: int, barrier: int | None, job: str | None = JOB) -> CommitRecord:
    return CommitRecord(version, "write", job_id=job, barrier=barrier)


def test_nothing_after_the_baseline_means_write() -> None:
    assert plan() == SinkPlan()


def test_this_barriers_own_commit_is_reused_after_a_crash() -> None:
    assert plan(write(5, B)) == SinkPlan(reuse=5)
    schema_first = CommitRecord(5, "schema", job_id=JOB, barrier=B)
    assert plan(schema_first, write(6, B)) == SinkPlan(reuse=6)
    assert plan(schema_first) == SinkPlan()  # columns added, data not yet committed: write


def test_commits_of_aborted_attempts_are_undone() -> None:
    assert plan(write(5, 600)) == SinkPlan(undo=(5,))
    assert plan(write(5, 600), write(6, B)) == SinkPlan(undo=(5, 6))  # rewrite b on the baseline


def test_commits_before_a_restore_to_the_baseline_do_not_count() -> None:
    undo = CommitRecord(6, "restore", job_id=JOB, restored_snapshot_id=4)
    assert plan(write(5, 600), undo) == SinkPlan()
    assert plan(write(5, 600), undo, write(7, B)) == SinkPlan(reuse=7)
    rollback = CommitRecord(6, "restore", restored_snapshot_id=4)  # a rollback's restore, untagged
    assert plan(write(5, B), rollback) == SinkPlan()  # a commit of b before a rollback is recomputed
    emptied = CommitRecord(1, "restore", job_id=JOB, restored_snapshot_id=None)
    assert plan(write(0, 600), emptied, baseline=None) == SinkPlan()


def test_row_neutral_commits_are_ignored() -> None:
    assert plan(CommitRecord(5, "other"), write(6, B), CommitRecord(7, "other")) == SinkPlan(reuse=6)


@pytest.mark.parametrize(
    ("record", "what"),
    [
        (write(5, None, job=None), "a write by an unknown writer"),
        (write(5, B, job="other-job"), f"a write by other-job for barrier {B}"),
        (CommitRecord(5, "restore", restored_snapshot_id=2), "a restore to 2"),
        (CommitRecord(5, "restore", job_id=JOB, restored_snapshot_id=3), "a restore to 3"),
    ],
)
def test_anything_else_is_an_error_naming_the_table_the_commit_and_the_baseline(
    record: CommitRecord, what: str
) -> None:
    with pytest.raises(UnexpectedSinkCommit) as refused:
        plan(record)
    message = str(refused.value)
    assert f"sink {T!r} holds snapshot 5 ({what}) after snapshot 4" in message
    assert f"Restore {T!r} to 4" in message and f"job {JOB!r}, barrier {B}" in message
    assert (refused.value.table, refused.value.baseline, refused.value.snapshot_id) == (T, 4, 5)


def test_this_jobs_undo_to_a_commit_metaservice_lost_is_undone_too() -> None:
    """An asynchronous standby's failover lost the commit of 600 (snapshot 5): the attempt at 650 had it as its
    baseline, was refused (the barrier was lost too) and undone back to 5. The baseline is 4 again: all of it goes,
    whatever barrier is written now, the same number included."""
    undo = CommitRecord(7, "restore", job_id=JOB, restored_snapshot_id=5)
    assert plan(write(5, 600), write(6, 650), undo) == SinkPlan(undo=(5, 6, 7))
    assert plan(write(5, B), write(6, 650), undo) == SinkPlan(undo=(5, 6, 7))
    again = CommitRecord(9, "restore", job_id=JOB, restored_snapshot_id=7)  # a second failover undid on top
    assert plan(write(5, 600), write(6, 650), undo, write(8, 680), again) == SinkPlan(undo=(5, 6, 7, 8, 9))


def test_an_undo_to_a_snapshot_this_job_did_not_write_after_the_baseline_is_an_error() -> None:
    before_baseline = CommitRecord(6, "restore", job_id=JOB, restored_snapshot_id=3)
    with pytest.raises(UnexpectedSinkCommit):
        plan(write(5, 600), before_baseline)
    by_another = CommitRecord(6, "restore", job_id="other-job", restored_snapshot_id=5)
    with pytest.raises(UnexpectedSinkCommit):
        plan(write(5, 600), by_another)
