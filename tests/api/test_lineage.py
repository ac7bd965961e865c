"""`GET /lineage`: the whole graph or around one table, by direction and depth, capped and deduplicated."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from metaservice.schemas import LineageGraph
from tests.support.pipelines import (
    AUDIT,
    CUSTOMERS,
    DIAMOND,
    DIM,
    ENRICHED,
    ORDERS,
    REVENUE,
    Driver,
)

Graph = dict[str, Any]


def lineage(api: httpx.Client, **params: Any) -> Graph:
    response = api.get("/lineage", params=params)
    assert response.status_code == 200, response.text
    # built from plain rows, the answer is byte for byte what the wire model serialises
    assert LineageGraph.model_validate_json(response.content).model_dump_json().encode() == response.content
    graph: Graph = response.json()
    ids = [n["id"] for n in graph["nodes"]]
    edges = [(e["from"], e["to"]) for e in graph["edges"]]
    assert len(ids) == len(set(ids)), "duplicate nodes"
    assert len(edges) == len(set(edges)), "duplicate edges"
    assert all(a in ids and b in ids for a, b in edges), "edge to a node that is not in the answer"
    return graph


def node_ids(graph: Graph) -> set[str]:
    return {n["id"] for n in graph["nodes"]}


def tables(*names: str) -> set[str]:
    return {f"table:{n}" for n in names}


def jobs(*names: str) -> set[str]:
    return {f"job:{n}" for n in names}


@pytest.fixture(name="diamond")
def fx_diamond(api: httpx.Client) -> Driver:
    return Driver(api, DIAMOND)


def test_whole_graph_has_every_table_job_and_edge(diamond: Driver) -> None:
    graph = lineage(diamond.api)
    assert graph["table"] is None and graph["truncated"] is False
    assert node_ids(graph) == tables(ORDERS, CUSTOMERS, ENRICHED, AUDIT, DIM, REVENUE) | jobs(*DIAMOND)
    expected = set()
    for job, (sources, sinks) in DIAMOND.items():
        expected |= {(f"table:{t}", f"job:{job}") for t in sources}
        expected |= {(f"job:{job}", f"table:{t}") for t in sinks}
    assert {(e["from"], e["to"]) for e in graph["edges"]} == expected
    kinds = {n["id"]: n.get("table_kind") for n in graph["nodes"] if n["kind"] == "table"}
    assert kinds[f"table:{ORDERS}"] == kinds[f"table:{CUSTOMERS}"] == "root"
    assert kinds[f"table:{REVENUE}"] == "intermediate"


def test_direction_selects_ancestors_or_descendants(diamond: Driver) -> None:
    up = lineage(diamond.api, table=REVENUE, direction="upstream")
    assert node_ids(up) == tables(REVENUE, ENRICHED, DIM, ORDERS, CUSTOMERS) | jobs("revenue", "enrich", "dims")

    down = lineage(diamond.api, table=ORDERS, direction="downstream")
    assert node_ids(down) == tables(ORDERS, ENRICHED, AUDIT, REVENUE) | jobs("enrich", "audit", "revenue")
    assert (f"table:{DIM}", "job:revenue") not in {(e["from"], e["to"]) for e in down["edges"]}

    both = lineage(diamond.api, table=ENRICHED)  # default: both
    assert both["direction"] == "both"
    assert node_ids(both) == tables(ENRICHED, ORDERS, REVENUE) | jobs("enrich", "revenue")


def test_depth_counts_job_hops(diamond: Driver) -> None:
    assert node_ids(lineage(diamond.api, table=ORDERS, depth=0)) == tables(ORDERS)
    assert lineage(diamond.api, table=ORDERS, depth=0)["edges"] == []
    one = lineage(diamond.api, table=ORDERS, direction="downstream", depth=1)
    assert node_ids(one) == tables(ORDERS, ENRICHED, AUDIT) | jobs("enrich", "audit")
    assert one["truncated"] is False and one["depth"] == 1
    two = lineage(diamond.api, table=ORDERS, direction="downstream", depth=2)
    assert node_ids(two) == node_ids(one) | tables(REVENUE) | jobs("revenue")


def test_node_cap_truncates(diamond: Driver) -> None:
    capped = lineage(diamond.api, table=ORDERS, direction="downstream", max_nodes=3)
    assert capped["truncated"] is True and len(capped["nodes"]) == 3
    assert f"table:{ORDERS}" in node_ids(capped)
    whole = lineage(diamond.api, max_nodes=4)
    assert whole["truncated"] is True and len(whole["nodes"]) == 4
    # over the cap, the whole graph keeps the nodes nearest the roots
    assert node_ids(whole) <= tables(ORDERS, CUSTOMERS) | jobs("enrich", "audit", "dims")
    exact = lineage(diamond.api, table=ORDERS, direction="downstream", max_nodes=7)
    assert exact["truncated"] is False and len(exact["nodes"]) == 7


def test_diamond_lattice_has_each_node_and_edge_once(api: httpx.Client) -> None:
    """6 levels of 4 tables, each job reading every table of the level below: 4^6 paths, 24+24+1 nodes."""
    width, levels = 4, 6
    lattice: dict[str, tuple[list[str], list[str]]] = {}
    for level in range(levels):
        below = [f"lake.l{level}.t{i}" for i in range(width)]
        for i in range(width):
            lattice[f"j{level}_{i}"] = (below, [f"lake.l{level + 1}.t{i}"])
    lattice["sink"] = ([f"lake.l{levels}.t{i}" for i in range(width)], ["lake.out.all"])
    Driver(api, lattice)

    graph = lineage(api, table="lake.out.all", direction="upstream", depth=100)
    assert len([n for n in graph["nodes"] if n["kind"] == "table"]) == width * (levels + 1) + 1
    assert len([n for n in graph["nodes"] if n["kind"] == "job"]) == width * levels + 1
    assert len(graph["edges"]) == width * levels * (width + 1) + width + 1
    down = lineage(api, table="lake.l0.t0", direction="downstream", depth=3)
    assert {n["id"] for n in down["nodes"] if n["kind"] == "table"} == {"table:lake.l0.t0"} | {
        f"table:lake.l{lvl}.t{i}" for lvl in (1, 2, 3) for i in range(width)
    }


def test_caps_around_the_size_of_a_lattice_cut_exactly_where_a_level_walk_would(api: httpx.Client) -> None:
    """A lattice has more links than nodes, so the database walk stops on its row budget and goes on later."""
    width, levels = 4, 5
    lattice: dict[str, tuple[list[str], list[str]]] = {}
    for level in range(levels):
        below = [f"lake.l{level}.t{i}" for i in range(width)]
        for i in range(width):
            lattice[f"j{level}_{i}"] = (below, [f"lake.l{level + 1}.t{i}"])
    Driver(api, lattice)
    whole = lineage(api, table="lake.l5.t0", direction="upstream", depth=100)
    size = len(whole["nodes"])
    assert size == 1 + 2 * width * levels - (width - 1) and whole["truncated"] is False
    assert lineage(api, table="lake.l5.t0", direction="upstream", depth=100, max_nodes=size) == whole
    for cap in (size - 1, width + 3, 2):
        capped = lineage(api, table="lake.l5.t0", direction="upstream", depth=100, max_nodes=cap)
        assert capped["truncated"] is True and len(capped["nodes"]) == cap
        assert node_ids(capped) < node_ids(whole)
    down = lineage(api, table="lake.l0.t0", direction="both", depth=3, max_nodes=9)
    assert down["truncated"] is True and len(down["nodes"]) == 9


def test_a_wide_first_level_is_cut_exactly_whether_its_jobs_write_tables_or_not(api: httpx.Client) -> None:
    """Jobs reading the table take one place, or two with a table of their own: the cap falls in either."""
    hub = "lake.raw.hub"
    jobs: dict[str, tuple[list[str], list[str]]] = {f"r{i:02d}": ([hub], []) for i in range(12)}
    jobs |= {f"w{i:02d}": ([hub], [f"lake.out.t{i:02d}"]) for i in range(12)}
    Driver(api, jobs)
    whole = lineage(api, table=hub, direction="downstream")
    assert len(whole["nodes"]) == 1 + 24 + 12 and whole["truncated"] is False
    order = ["table:" + hub] + [f"job:r{i:02d}" for i in range(12)]
    order += [n for i in range(12) for n in (f"job:w{i:02d}", f"table:lake.out.t{i:02d}")]
    for cap in (1, 2, 5, 13, 14, 15, 20, 25, 36, 37):
        capped = lineage(api, table=hub, direction="both", max_nodes=cap)
        assert node_ids(capped) == set(order[:cap]), cap
        assert capped["truncated"] is (cap < len(order))


def test_nodes_carry_freshness_and_recent_timings(diamond: Driver) -> None:
    barrier = diamond.run("enrich", {ORDERS: 3})
    graph = lineage(diamond.api, table=ENRICHED, direction="upstream")
    nodes = {n["id"]: n for n in graph["nodes"]}
    table = nodes[f"table:{ENRICHED}"]
    assert table["newest_complete_barrier"] == barrier and table["newest_complete_snapshot_id"] == 0
    assert table["delay_seconds"] >= 0
    root = nodes[f"table:{ORDERS}"]
    assert root["newest_complete_snapshot_id"] == 3 and root["newest_complete_barrier"] == barrier
    job = nodes["job:enrich"]
    assert job["last_barrier"] == barrier and job["lag_seconds"] == 0
    (run,) = job["recent_runs"]
    history = diamond.last_run("enrich")
    assert run["status"] == "committed" and run["barrier"] == barrier
    assert run["processing_seconds"] == history["duration_seconds"]
    never = lineage(diamond.api, table=DIM, depth=0)["nodes"][0]
    assert never["newest_complete_barrier"] is None and never["delay_seconds"] is None


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"table": "lake.raw.nope"}, 404, "not_found"),
        ({"table": ORDERS, "direction": "sideways"}, 422, "invalid_request"),
        ({"table": ORDERS, "depth": 101}, 422, "invalid_request"),
        ({"table": ORDERS, "depth": -1}, 422, "invalid_request"),
        ({"table": ORDERS, "depth": "deep"}, 422, "invalid_request"),
        ({"table": "not-a-table"}, 422, "invalid_request"),
        ({"max_nodes": 0}, 422, "invalid_request"),
    ],
)
def test_bad_lineage_requests_are_problems(diamond: Driver, params: dict[str, Any], status: int, code: str) -> None:
    response = diamond.api.get("/lineage", params=params)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code


def test_page_is_served_with_a_strict_content_security_policy(api: httpx.Client) -> None:
    redirect = api.get("/ui", follow_redirects=False)
    assert redirect.status_code in (307, 308) and redirect.headers["location"].endswith("/ui/")
    page = api.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script src="app.js"' in page.text
    for asset in ("app.js", "style.css", "favicon.svg"):
        assert api.get(f"/ui/{asset}").status_code == 200
    assert api.get("/ui/../pyproject.toml").status_code == 404
