"""One measured load phase against a running server: warm-up, wrk with CPU accounting, and exactly how many
requests the server answered and how many SQL statements it ran for them (pg_stat_statements)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench import cluster, load
from bench.context import Context
from bench.server import served, served_between, statements
from tests.support import ServerProcess, wait_until


@dataclass(frozen=True)
class Phase:
    load: load.LoadResult
    served: int  # requests the server answered in the phase, from its own counters (exact with one worker)
    statements: cluster.StatementCount | None
    backends: dict[str, float]  # mean number of the server's database connections in each state
    # per (method, route): (requests served, statements the server's own tally counted for them)
    routes: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)

    def statements_per_route(self, method: str, route: str) -> float | None:
        requests, count = self.routes.get((method, route), (0, 0.0))
        return count / requests if requests else None

    @property
    def statements_per_request(self) -> float | None:
        if self.statements is None or not self.served:
            return None
        return self.statements.calls / self.served

    def cpu_ms_per_request(self, group: str) -> float:
        """CPU milliseconds `group` ("server", "postgres", "wrk") spent per request served."""
        return 1000 * self.load.cpu_seconds.get(group, 0.0) / max(1, self.served)

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "load": self.load.as_json(),
            "served_requests": self.served,
            "database_connections_by_state": self.backends,
            "cpu_ms_per_request": {g: round(self.cpu_ms_per_request(g), 3) for g in ("server", "postgres", "wrk")},
            "statements_per_request_by_route": {
                f"{method} {route}": round(count / requests, 3)
                for (method, route), (requests, count) in sorted(self.routes.items())
                if requests
            },
        }
        if self.statements is not None:
            served = max(1, self.served)
            body["statements_per_request"] = round(self.statements_per_request or 0.0, 2)
            body["statements"] = [
                {"calls": calls, "per_request": round(calls / served, 2), "query": query}
                for calls, query in self.statements.by_query[:25]
            ]
            body["nested_statements_per_request"] = round(self.statements.nested_calls / served, 2)
            body["nested_statements"] = [
                {"calls": calls, "per_request": round(calls / served, 2), "query": query}
                for calls, query in self.statements.nested_by_query[:10]
            ]
        return body


def drive(
    ctx: Context,
    server: ServerProcess,
    *,
    database: str,
    path: str,
    script_args: list[str] | Callable[[], list[str]],
    connections: int,
    threads: int | None = None,
    count: bool = True,
    headers: Mapping[str, str] | None = None,
) -> Phase:
    """Warm up, then run wrk for `ctx.seconds`; with `count`, also statements and served requests (one worker).

    `script_args` may be a callable: it is called once per wrk run (the cycle needs fresh snapshot ids).
    """
    assert server.process is not None
    url = f"{server.base_url}{path}"

    def args() -> list[str]:
        return script_args() if callable(script_args) else script_args

    load.run_wrk(url, args(), connections=connections, seconds=ctx.warmup, threads=threads, headers=headers)

    def quiet() -> bool:
        return cluster.busy_backends(ctx.cluster, database) == 0

    wait_until(quiet, timeout=30, what="the warm-up's requests to finish")
    before = served(server.base_url) if count else {}
    tally_before = statements(server.base_url) if count else {}
    if count:
        cluster.reset_statements(ctx.cluster)
    meter = load.CpuMeter({"server": server.process.pid, "postgres": ctx.cluster.server.get_pid()})
    with cluster.ActivitySampler(ctx.cluster, database) as activity:
        result = load.run_wrk(
            url, args(), connections=connections, seconds=ctx.seconds, threads=threads, meter=meter, headers=headers
        )
    wait_until(quiet, timeout=30, what="the requests in flight to finish")
    if not count:
        return Phase(result, result.requests, None, activity.averages())
    counted = cluster.count_statements(ctx.cluster, database)
    after = served(server.base_url)
    tally_after = statements(server.base_url)
    routes: dict[tuple[str, str], tuple[int, float]] = {}
    for (method, route), total in tally_after.items():
        requests = int(sum(v - before.get(k, 0.0) for k, v in after.items() if k[:2] == (method, route)))
        routes[(method, route)] = (requests, total - tally_before.get((method, route), 0.0))
    return Phase(result, served_between(before, after), counted, activity.averages(), routes)
