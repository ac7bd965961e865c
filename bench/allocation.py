"""The allocation function against the size of the catalog: one call with 100 root tables and with 10,000.

Every barrier seals "every sealable root whose newest known snapshot differs from its open range", and the
function finds those by walking every root table (migration 2026-11-24-1300, the `changed` CTE). This benchmark
measures how that walk grows. No server is involved: the function is called directly on one autocommit
connection, which is what the allocator does. For each size, on a fresh database of N jobs with one root each,
every root is reported and sealed once. Then three medians are taken:
- one `barrier` request while nothing changed;
- one `seal` of a single newly reported root;
- a batch of 12 `barrier` requests, the size a coalesced batch reaches under POST /barriers at c=32.

The rows carry no goal: no issue sets one yet. They are the baseline for making the walk proportional to what
changed (docs/design.md, Open issues).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any, Literal

import psycopg

from bench import seed
from bench.context import Context
from bench.report import Outcome, ms
from metaservice.repositories.allocator import AllocationRequest

SIZES = (100, 10_000)
REPEAT = 40


def _request(kind: Literal["barrier", "seal", "report"], **fields: Any) -> dict[str, Any]:
    """One request as the allocator sends it (its own wire form, so the benchmark calls what the service calls)."""
    return AllocationRequest(kind, by="bench", **fields).wire()


def _call(conn: psycopg.Connection[Any], requests: list[dict[str, Any]]) -> float:
    t0 = time.perf_counter()
    answer = conn.execute("SELECT metaservice_issue_barriers(%s)", [json.dumps(requests)]).fetchone()
    elapsed = (time.perf_counter() - t0) * 1000
    assert answer is not None and all(a.get("error") is None for a in answer[0]), answer
    return elapsed


def _one_size(ctx: Context, tables: int) -> dict[str, Any]:
    url = ctx.cluster.fresh_database(f"bench_allocation_{tables}")
    seed.register_rows(url, seed.one_root_per_job(tables))
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT id, name FROM tables WHERE starts_with(name, %s) ORDER BY id", [seed.ROOT_PREFIX])
        roots = [(int(i), str(n)) for i, n in found]
        for start in range(0, len(roots), 500):
            _call(conn, [_request("report", roots={name: 1 for _, name in roots[start : start + 500]})])
        _call(conn, [_request("barrier")])  # seals every root once
        conn.execute("VACUUM ANALYZE")
        idle = [_call(conn, [_request("barrier")]) for _ in range(REPEAT)]
        sealing = [
            _call(conn, [_request("seal", roots={name: 2 + k}, when_unsealed=[table_id])])
            for k, (table_id, name) in enumerate(roots[:REPEAT])
        ]
        batch = [_call(conn, [_request("barrier")] * 12) for _ in range(REPEAT // 2)]
    return {
        "roots": len(roots),
        "barrier_ms": statistics.median(idle),
        "seal_ms": statistics.median(sealing),
        "batch12_ms": statistics.median(batch),
    }


def run(ctx: Context) -> Outcome:
    outcome = Outcome(
        "allocation",
        "metaservice_issue_barriers with 100 and 10,000 root tables (the seal walks every root)",
        {"sizes": SIZES, "repeat": REPEAT, "statistic": "median"},
    )
    small, large = (_one_size(ctx, n) for n in SIZES)
    outcome.figures = {str(SIZES[0]): small, str(SIZES[1]): large}
    for key, label in (
        ("barrier_ms", "one barrier, nothing changed"),
        ("seal_ms", "a seal of one newly reported root"),
        ("batch12_ms", "a batch of 12 barriers"),
    ):
        outcome.row(
            f"{label}: {large['roots']:,} roots vs {small['roots']:,}",
            ms(large[key]),
            ms(small[key]),
            large[key] / small[key],
        )
    return outcome
