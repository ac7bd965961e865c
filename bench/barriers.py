"""`POST /barriers` at 32 connections against the no-op endpoint of the same server, with SQL per request.

The catalog is the 100-job pipeline of the cycle benchmark with every root at a known snapshot, so each
barrier runs the real seal over 100 root tables (none of which changed: the common case). Afterwards pgbench
replays the server's own allocation statement for one request (`metaservice_issue_barriers` with a batch of
one) on the same database at 32 clients: the rate the database allows one allocation per statement, i.e. the
ceiling of POST /barriers without coalescing. The server batches concurrent requests into one call, so it can
beat that ceiling; "statements per request" below one shows the batching.
"""

from __future__ import annotations

import httpx

from bench import seed
from bench.cluster import WORK_DIR
from bench.context import Context
from bench.measure import drive
from bench.report import Outcome, ms, rps
from bench.server import serving

CONNECTIONS = 32
JOBS = 100


def transaction_script() -> str:
    """One uncoalesced POST /barriers as a pgbench script: the allocation function called for a single request,
    exactly as the server's allocator calls it (`AllocationRequest.wire`)."""
    import json

    from metaservice.repositories.allocator import _CALL, AllocationRequest

    batch = json.dumps([AllocationRequest("barrier", by="pgbench").wire()])
    path = WORK_DIR / "barrier_transaction.sql"
    path.write_text(_CALL.replace("%s", "'" + batch + "'::jsonb") + ";\n")
    path.chmod(0o644)
    return str(path)


def run(ctx: Context) -> Outcome:
    outcome = Outcome(
        "barriers",
        "POST /barriers at 32 connections vs the no-op endpoint",
        {"connections": CONNECTIONS, "seconds": ctx.seconds, "root_tables": JOBS, "server_workers": 1},
    )
    database = "bench_barriers"
    url = ctx.cluster.fresh_database(database)
    pipeline = seed.one_root_per_job(JOBS)
    seed.register_rows(url, pipeline)
    with serving(url) as server:
        roots = {job.sources[0]: 1 for job in pipeline}
        httpx.post(f"{server.base_url}/barriers", json={"root_snapshots": roots}, timeout=30).raise_for_status()

        noop = drive(
            ctx, server, database=database, connections=CONNECTIONS, path="/healthz", script_args=["static", "GET"]
        )
        subject = drive(
            ctx,
            server,
            database=database,
            connections=CONNECTIONS,
            path="/barriers",
            script_args=["static", "POST", "{}"],
        )

    replay = ctx.cluster.pgbench(
        database, ["-n", "-j", "2", "-T", str(ctx.seconds), "-c", str(CONNECTIONS), "-f", transaction_script()]
    )
    replay_tps = float(replay.split("tps = ")[1].split()[0])

    b, n = subject.load, noop.load
    outcome.figures = {"noop": noop.as_json(), "barriers": subject.as_json(), "pgbench_transaction_tps": replay_tps}
    ratio = b.rps / n.rps
    per_request = subject.statements_per_request or 0.0
    outcome.row("POST /barriers req/s vs no-op", rps(b.rps), rps(n.rps), ratio, "≥ 0.50", ratio >= 0.5)
    outcome.row("POST /barriers p50", ms(b.p50_ms), f"no-op {ms(n.p50_ms)}")
    outcome.row("POST /barriers p99", ms(b.p99_ms), f"no-op {ms(n.p99_ms)}", goal="≤ 30 ms", passed=b.p99_ms <= 30)
    outcome.row(
        "SQL statements per request",
        f"{per_request:.2f}",
        f"{subject.served} requests",
        goal="≤ 1",
        passed=per_request <= 1,
    )
    outcome.row(
        "vs pgbench: one allocation per statement",
        rps(b.rps),
        f"{replay_tps:,.0f} tps",
        b.rps / replay_tps,
    )
    outcome.row(
        "CPU per request: server / postgres",
        f"{subject.cpu_ms_per_request('server'):.2f} / {subject.cpu_ms_per_request('postgres'):.2f} ms",
        f"no-op {noop.cpu_ms_per_request('server'):.2f} / {noop.cpu_ms_per_request('postgres'):.2f} ms",
    )
    outcome.row("errors (non-2xx, socket)", str(b.failed), passed=None)
    outcome.notes.append(f"CPU cores used during POST /barriers: {b.cpu_share()}.")
    outcome.notes.append(f"server's database connections during POST /barriers (mean count): {subject.backends}.")
    if subject.statements:
        top = "; ".join(f"{c / max(1, subject.served):.2f}x {q[:90]}" for c, q in subject.statements.by_query[:8])
        outcome.notes.append(f"statements per POST /barriers: {top}")
    return outcome
