"""`python -m bench.profile [--seconds N]`: where PostgreSQL's time goes during the next+commit cycle.

Not a benchmark (it asserts no goal and writes no result file): the tool behind docs/design.md "Performance".
It seeds the cycle benchmark's 100 jobs on the benchmark cluster, warms up, resets `pg_stat_statements`, drives
the cycle with wrk, and prints the statements by total execution time: calls, total and mean milliseconds, and
how often and how long PostgreSQL planned them (0 plans: the prepared statement's cached generic plan served
every call; nested statements of the allocation function included, so its parts show), with the CPU each process
used.
`--server-env NAME=VALUE` passes a setting to the server (say `METASERVICE_POOL_SIZE=60`). `--catalog N` registers
N more jobs (each with its own root and sink) that never call: the same cycle over a large catalog. `--auth` turns
authentication on: every request carries a job token (the server looks it up for each request).
"""

from __future__ import annotations

import argparse

from bench import cluster, load, seed
from bench.context import Context
from bench.cycle import JOBS, cycle_args
from bench.server import serving

DATABASE = "bench_profile"
_TOP = """
    SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3), plans,
           round(total_plan_time::numeric, 1),
           left(regexp_replace(query, '\\s+', ' ', 'g'), 110)
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
     WHERE d.datname = %s
     ORDER BY total_exec_time DESC LIMIT %s
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--seconds", type=int, default=10, help="length of the measured load")
    parser.add_argument("--top", type=int, default=10, help="statements to print")
    parser.add_argument(
        "--poll",
        action="store_true",
        help="the jobs' roots never move: every job polls `next` reporting the snapshot it already reported",
    )
    parser.add_argument("--catalog", type=int, default=0, help="idle jobs registered besides the cycle's")
    parser.add_argument("--auth", action="store_true", help="auth on: every request carries a job token")
    parser.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE", help="a setting for the server (repeat)"
    )
    args = parser.parse_args(argv)
    server_env = dict(item.split("=", 1) for item in args.server_env)
    load.ensure_wrk()
    ctx = Context(cluster.start(), quick=False)
    url = ctx.cluster.fresh_database(DATABASE)
    seed.register_rows(url, [*seed.one_root_per_job(JOBS), *seed.idle_jobs(args.catalog)])
    headers = {}
    if args.auth:
        headers["Authorization"] = f"Bearer {seed.job_token(url, jobs=seed.JOB_PREFIX + '*')}"
        server_env["METASERVICE_AUTH_ENABLED"] = "true"
    with ctx.cluster.reloaded("pg_stat_statements.track_planning", "on"), serving(url, env=server_env) as server:
        target = f"{server.base_url}/"
        warmup = cycle_args()
        if args.poll:
            warmup[0] = "poll"
        load.run_wrk(target, warmup, connections=JOBS, seconds=3, threads=JOBS, headers=headers)
        # The cycle's measured run starts above every snapshot the warm-up reported (a snapshot at or below the
        # root's newest is no news: every answer would be a wait); polling reports the warm-up's snapshot again.
        script = warmup if args.poll else cycle_args()
        cluster.reset_statements(ctx.cluster)
        meter = load.CpuMeter({"server": server.process.pid, "postgres": ctx.cluster.server.get_pid()})  # type: ignore[union-attr]
        result = load.run_wrk(
            target, script, connections=JOBS, seconds=args.seconds, threads=JOBS, meter=meter, headers=headers
        )
    print(
        f"{result.rps:.0f} req/s ({result.cycles} commits, {result.waits} waits), p50 {result.p50_ms:.1f} ms, "
        f"p99 {result.p99_ms:.1f} ms; cores {result.cpu_share()}"
    )
    print(f"{'calls':>8} {'total ms':>10} {'mean ms':>8} {'plans':>8} {'plan ms':>8}  statement")
    with cluster.connect(ctx.cluster.url()) as conn:
        for calls, total, mean, plans, plan_ms, query in conn.execute(_TOP, (DATABASE, args.top)):
            print(f"{calls:>8} {total:>10} {mean:>8} {plans:>8} {plan_ms:>8}  {query}")


if __name__ == "__main__":
    main()
