"""`python -m bench.coalescing [--jobs K] [--rounds N]`: what one statement per step costs against one per batch.

Not a benchmark (it asserts no goal and writes no result file): the measurement behind docs/design.md "Coalesced
statements". K jobs each take a step at once, N rounds; alternately, their gathers run as K statements or as one
(`repositories/protocol.gather_many`), and their commits' writes as K statements or as one (`apply_many`), on one
idle connection. It prints the CPU each costs per step: the server's (this process, `time.process_time`) and
PostgreSQL's (the connection's backend, from `/proc/<pid>/schedstat`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import anyio

from bench import cluster, seed
from bench.context import Context

if TYPE_CHECKING:
    from metaservice.db.database import Connection
    from metaservice.domain.world import Writes
    from metaservice.repositories.protocol import GatherRequest

DATABASE = "bench_coalescing"


def _backend_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as stat:
        return int(stat.read().split()[0])


async def _gathers(conn: Connection, requests: list[GatherRequest], *, one_by_one: bool) -> None:
    from metaservice.repositories import protocol

    if one_by_one:
        for r in requests:
            await protocol.gather_many(conn, [r])
    else:
        await protocol.gather_many(conn, requests)


async def _writes(conn: Connection, plans: list[Writes], *, one_by_one: bool) -> None:
    from metaservice.repositories import protocol

    if one_by_one:
        for plan in plans:
            assert await protocol.apply_many(conn, [plan]) == ["stored"]
    else:
        assert await protocol.apply_many(conn, plans) == ["stored"] * len(plans)


async def _measure(url: str, jobs: int, rounds: int) -> dict[str, list[float]]:
    from metaservice.db.database import Database
    from metaservice.repositories import protocol
    from metaservice.runtime import Runtime
    from metaservice.services import barriers
    from metaservice.services.planner import Planner
    from metaservice.settings import Settings

    specs = seed.one_root_per_job(jobs)
    db = Database(Settings(database_url=url))
    await db.open()
    runtime = Runtime(db)
    conn = await db.connect()
    row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    assert row is not None
    pid = int(row[0])
    cpu: dict[str, list[float]] = {f"{what} {how}": [0.0, 0.0] for what in ("gather", "write") for how in ("1", "K")}

    async def timed(key: str, work: Awaitable[None]) -> None:
        server, backend = time.process_time_ns(), _backend_ns(pid)
        await work
        cpu[key][0] += (time.process_time_ns() - server) / 1e3 / jobs
        cpu[key][1] += (_backend_ns(pid) - backend) / 1e3 / jobs

    try:
        for n in range(rounds):
            snapshot, how = n + 1, "1" if n % 2 == 0 else "K"
            requests = []
            for s in specs:
                roots = {s.sources[0]: snapshot}
                decision = await barriers.next_barrier(runtime, job_id=s.job_id, root_snapshots=roots, min_interval=0)
                requests.append(protocol.GatherRequest(s.job_id, decision.barrier, windows=False))
            await timed(f"gather {how}", _gathers(conn, requests, one_by_one=how == "1"))
            plans = []
            for g, s in zip(await protocol.gather_many(conn, requests), specs, strict=True):
                assert g.job_id is not None and g.run_at is not None
                planner = Planner(g.world)
                planner.commit(g.job_id, g.run_at.first, {s.sinks[0]: snapshot}, g.run_at)
                plans.append(planner.writes)
            await timed(f"write {how}", _writes(conn, plans, one_by_one=how == "1"))
    finally:
        await conn.close()
        await runtime.close()
        await db.close()
    half = rounds / 2
    return {key: [server / half, backend / half] for key, (server, backend) in cpu.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.coalescing", description=__doc__)
    parser.add_argument("--jobs", type=int, default=8, help="steps taken at once (K)")
    parser.add_argument("--rounds", type=int, default=200, help="rounds, alternating one by one and together")
    args = parser.parse_args(argv)
    ctx = Context(cluster.start(), quick=False)
    url = ctx.cluster.fresh_database(DATABASE)
    seed.register_rows(url, seed.one_root_per_job(args.jobs))
    figures = anyio.run(_measure, url, args.jobs, args.rounds)
    print(f"CPU per step, {args.jobs} steps at once, {args.rounds // 2} rounds each way (µs: server / PostgreSQL)")
    for what in ("gather", "write"):
        (s1, p1), (sk, pk) = figures[f"{what} 1"], figures[f"{what} K"]
        print(
            f"  {what:6s} one statement per step {s1:7.1f} / {p1:7.1f}"
            f"   one per {args.jobs} steps {sk:7.1f} / {pk:7.1f}"
        )


if __name__ == "__main__":
    main()
