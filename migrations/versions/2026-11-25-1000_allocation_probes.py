"""The allocation function probes what it checks by index, instead of hashing whole tables on every call.

Seen with `auto_explain` (nested statements) on the cycle benchmark's database with 10,100 registered jobs: the
set-based check of a batch (migration 2026-11-25-0900) ran three of its per-request `EXISTS` tests as hashed
subplans, and the seal test of each `next` joined its roots by a hash over a sequential scan of every table.
PostgreSQL may turn a correlated `EXISTS` into a hash of the whole subquery when it expects many outer rows, and
the generic plan expects 100 keys per request of 100 requests (it cannot count a `jsonb` parameter):
- "the job reads this root" hashed every source edge of every job (10,100 rows, 1.4 ms of a 3 ms statement);
- "this key was issued" hashed every barrier carrying a key, and "a barrier is in flight" every run in flight:
  both grow with history and with the number of jobs;
- the seal test (`t.id IN (SELECT ... when_unsealed)`) scanned every table (20,200 rows, 0.8 ms a request);
- the UPDATE recording the batch's reports joined the reported names by a hash over every table (chosen once the
  catalog holds about 10,000 tables in the test; at 20,200 the planner probed).
In the cycle over that catalog (`python -m bench.profile --catalog 10000`) the batch's check took 26-27 ms a call.

`OFFSET 0` in a sublink keeps PostgreSQL from rewriting `EXISTS` into a hashable `IN` (it does not simplify a
subquery with an offset), so each test stays one index probe per request; the seal test takes its roots as an
array (`= ANY(ARRAY(...))`), which the primary key answers, and the UPDATE names the reported tables as an array
too, which the unique index on names answers. The answers are the same
(tests/concurrency/test_allocation_equivalence.py compares this function with the request-by-request one).

Revision ID: 3b7d9f1a2c48
Revises: 8c4a2e6d0f15
Create Date: 2026-11-25 10:00:00
"""

# ruff: noqa: E501  (the function's SQL lines are quoted as they stand in it)

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "3b7d9f1a2c48"
down_revision: str | None = "8c4a2e6d0f15"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each `old` occurs exactly once in the previous function.
_CHANGES = (
    (
        "                                              AND e.role = 'source' AND e.removed_at IS NULL) AS read",
        "                                              AND e.role = 'source' AND e.removed_at IS NULL OFFSET 0) AS read",
    ),
    (
        "EXISTS (SELECT 1 FROM barriers b WHERE b.request_key = q.key) AS issued",
        "EXISTS (SELECT 1 FROM barriers b WHERE b.request_key = q.key OFFSET 0) AS issued",
    ),
    (
        "EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = q.job_id AND r.status = 'in_flight')\n",
        "EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = q.job_id AND r.status = 'in_flight' OFFSET 0)\n",
    ),
    (
        "         WHERE t.name = r.name\n",
        "         WHERE t.name = r.name AND t.name = ANY(ARRAY(SELECT name FROM top))\n",
    ),
    (
        """                     WHERE t.id IN (SELECT value::bigint
                                      FROM jsonb_array_elements_text(coalesce(v_req -> 'when_unsealed', '[]')))
""",
        """                     WHERE t.id = ANY(ARRAY(SELECT value::bigint
                                            FROM jsonb_array_elements_text(coalesce(v_req -> 'when_unsealed', '[]'))))
""",
    ),
)


def _previous() -> ModuleType:
    """Migration 2026-11-25-0900, which defines the previous function (and reaches 2100's `patched`)."""
    path = Path(__file__).with_name("2026-11-25-0900_set_based_reports.py")  # migrations cannot import each other
    spec = importlib.util.spec_from_file_location("set_based_reports", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def issue_barriers() -> str:
    """This revision's `metaservice_issue_barriers`."""
    previous = _previous()
    return str(previous._previous()._previous().patched(previous.issue_barriers(), _CHANGES))


def upgrade() -> None:
    op.execute(issue_barriers())


def downgrade() -> None:
    op.execute(_previous().issue_barriers())
