"""`GET /lineage` depth 20 on a catalog of ~21,000 tables in three shapes, one connection, closed loop.

- chains: 500 chains of 20 tables (10,000 tables), asked `both` ways around a table in the middle of one;
- fan-out: one root read by 10,000 jobs, each writing its own table, asked `downstream` from the root, with
  the default node cap (5,000: a `truncated` answer) and with the API's largest (20,000: still `truncated`,
  the whole fan-out is 20,001 nodes);
- lattice: 20 layers x 50 tables, each job reading two neighbours of the layer above, asked `upstream` from
  a table of the last layer: a cone of 210 tables and 190 jobs, each reachable along many paths (diamonds).
Each shape is asked again `as_of` the newest barrier (the lineage in effect at it, node states as of it: issue 17),
which walks the edge history instead of the current edges.
Every table has completed one barrier and every job has one committed run, so nodes carry real state.
One client sends one request at a time for a fixed time (at least 3 requests: the biggest answers take
seconds). The server's and PostgreSQL's CPU per request are measured over the same requests (on a shared machine
they move much less than latency does), next to the load average before each phase. The endpoint is recorded as
"not available" when the route does not exist (404 without a problem code).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlencode

import httpx

from bench import cluster, load, seed
from bench.context import Context
from bench.report import Outcome, ms
from bench.seed import JobSpec
from bench.server import serving
from metaservice.repositories.driver import id_array
from metaservice.services import lineage

DEPTH = 20
MAX_NODES = 20_000


def _chains(chains: int, length: int) -> list[JobSpec]:
    return [
        JobSpec(f"lin-chain{c:04d}-p{p:02d}", (f"lin.chain{c:04d}.t{p - 1:02d}",), (f"lin.chain{c:04d}.t{p:02d}",))
        for c in range(chains)
        for p in range(1, length)
    ]


def _fan_out(width: int) -> list[JobSpec]:
    return [JobSpec(f"lin-fan-{i:05d}", ("lin.fan.root",), (f"lin.fan.t{i:05d}",)) for i in range(width)]


def _lattice(layers: int, width: int) -> list[JobSpec]:
    return [
        JobSpec(
            f"lin-lat-{k:02d}-{i:02d}",
            (f"lin.lat.l{k - 1:02d}_{i:02d}", f"lin.lat.l{k - 1:02d}_{(i + 1) % width:02d}"),
            (f"lin.lat.l{k:02d}_{i:02d}",),
        )
        for k in range(1, layers)
        for i in range(width)
    ]


def _explain(url: str, ids: dict[str, list[int]]) -> dict[str, list[str]]:
    """Plans of the walk (fan-out root downstream, one lattice table upstream) and of the node-state statements for
    the nodes of the default-cap fan-out answer, from repositories/lineage.py."""
    from metaservice.repositories import lineage as lineage_sql

    cap = lineage.DEFAULT_MAX_NODES
    fan_tables, fan_jobs = id_array(ids["fan_tables"][: cap // 2]), id_array(ids["fan_jobs"])
    wanted: dict[str, tuple[str, dict[str, Any]]] = {
        "_WALK_DOWN (fan-out root)": (
            "_WALK_DOWN",
            {"starts": id_array(ids["fan_root"]), "depth": DEPTH, "budget": cap, "first": cap + 1},
        ),
        "_WALK_UP (lattice, last layer)": (
            "_WALK_UP",
            {"starts": id_array(ids["lattice_last"][:1]), "depth": DEPTH, "budget": cap, "first": cap + 1},
        ),
        "_TABLE_NODES_OF (fan-out, default cap)": ("_TABLE_NODES_OF", {"ids": fan_tables}),
        "_JOB_NODES (fan-out, default cap)": ("_JOB_NODES", {"ids": fan_jobs, "per_job": lineage.RECENT_RUNS_PER_JOB}),
    }
    plans: dict[str, list[str]] = {}
    for label, (name, params) in wanted.items():
        statement = getattr(lineage_sql, name, None)
        if statement is None:
            plans[label] = ["not available"]
            continue
        query = statement if isinstance(statement, str) else cluster.psycopg_sql(statement)
        plans[label] = cluster.explain(url, query, params)
    return plans


def run(ctx: Context) -> Outcome:
    chains, fan, layers, width = ctx.pick((500, 10_000, 20, 50), (50, 1_000, 20, 10))
    outcome = Outcome(
        "lineage",
        "GET /lineage depth 20: chains, a 1→10,000 fan-out and a 20x50 lattice",
        {"chains": f"{chains}x20", "fan_out": fan, "lattice": f"{layers}x{width}", "depth": DEPTH, "connections": 1},
    )
    jobs = _chains(chains, 20) + _fan_out(fan) + _lattice(layers, width)
    database = "bench_lineage"
    url = ctx.cluster.fresh_database(database)
    seed.register_rows(url, jobs)
    seed.complete_once(url)
    with cluster.connect(url) as conn:
        barrier = int(conn.execute("SELECT max(barrier) FROM barriers").fetchone()[0])  # type: ignore[index]
    queries: dict[str, dict[str, str | int]] = {
        "chain (both)": {"table": f"lin.chain{chains // 2:04d}.t10", "direction": "both"},
        "fan-out (downstream, default node cap)": {"table": "lin.fan.root", "direction": "downstream"},
        "fan-out (downstream, max_nodes 20,000)": {
            "table": "lin.fan.root",
            "direction": "downstream",
            "max_nodes": MAX_NODES,
        },
        "lattice (upstream)": {"table": f"lin.lat.l{layers - 1:02d}_{width // 2:02d}", "direction": "upstream"},
    }
    for label in ("chain (both)", "fan-out (downstream, default node cap)", "lattice (upstream)"):
        queries[f"{label}, as_of barrier"] = queries[label] | {"as_of": barrier}
    results: dict[str, Any] = {}
    with serving(url) as server:
        for label, query in queries.items():
            path = "/lineage?" + urlencode({**query, "depth": DEPTH})
            probe = httpx.get(f"{server.base_url}{path}", timeout=120)
            if probe.status_code == 404 and "code" not in probe.json():
                results[label] = {"available": False}
                outcome.row(f"{label} p99", "not available", goal="≤ 200 ms", passed=None)
                continue
            probe.raise_for_status()
            graph = probe.json()
            shape = {"nodes": len(graph["nodes"]), "edges": len(graph["edges"]), "truncated": graph["truncated"]}
            meter = load.CpuMeter({"server": server.process.pid, "postgres": ctx.cluster.server.get_pid()})  # type: ignore[union-attr]
            load_average = round(os.getloadavg()[0], 2)
            result = load.sequential(f"{server.base_url}{path}", seconds=ctx.seconds, meter=meter)
            cpu_ms = {k: round(result.cpu_seconds[k] * 1000 / result.requests, 1) for k in ("server", "postgres")}
            results[label] = {"available": True, "query": query, "answer": shape, "bytes": len(probe.content)} | {
                "load": result.as_json(),
                "cpu_ms_per_request": cpu_ms,
                "load_average_before": load_average,
            }
            outcome.row(
                f"{label} p99",
                ms(result.p99_ms),
                f"p50 {ms(result.p50_ms)}, {result.requests} req, {shape['nodes']:,} nodes;"
                f" CPU/req server {cpu_ms['server']:.0f} + PG {cpu_ms['postgres']:.0f} ms; load {load_average}",
                goal="≤ 200 ms",
                passed=result.p99_ms <= 200,
            )
    with cluster.connect(url) as conn:

        def ids(where: str) -> list[int]:
            return [int(r[0]) for r in conn.execute(f"SELECT id FROM tables WHERE {where}")]

        table_ids = {
            "fan_root": ids("name = 'lin.fan.root'"),
            "fan_tables": ids("name LIKE 'lin.fan.t%' ORDER BY id"),
            "fan_jobs": [
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM jobs WHERE name LIKE 'lin-fan-%%' ORDER BY id LIMIT %s",
                    (lineage.DEFAULT_MAX_NODES // 2,),
                )
            ],
            "lattice_last": ids(f"name LIKE 'lin.lat.l{layers - 1:02d}_%' ORDER BY id"),
        }
    plans = _explain(url, table_ids)
    outcome.figures = {
        "queries": results,
        "explain": plans,
        "tables": len({t for j in jobs for t in (*j.sources, *j.sinks)}),
    }
    for label, lines in plans.items():
        outcome.notes.append(f"EXPLAIN (ANALYZE, BUFFERS) {label}:\n  " + "\n  ".join(lines))
    ctx.cluster.drop_database(database)
    return outcome
