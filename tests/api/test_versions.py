"""`POST /versions` stepping back over aborted barriers, in the requested tables and in their components.

orders ──► enrich ──► orders_enriched ──┐
   └─────► audit  ──► order_audit       ├──► revenue ──► revenue_by_day
customers ► dims ───► customer_dim ─────┘
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.pipelines import (
    AUDIT,
    CUSTOMERS,
    DIM,
    ENRICHED,
    ORDERS,
    REVENUE,
    Pipeline,
)


@pytest.fixture(name="pipeline")
def fx_pipeline(api: httpx.Client) -> Pipeline:
    pipeline = Pipeline(api)
    pipeline.register()
    return pipeline


def aborted(pipeline: Pipeline, job: str, **roots: int) -> int:
    decision = pipeline.next(job, **roots)
    assert decision["action"] == "process"
    response = pipeline.api.post(f"/jobs/{job}/barriers/{decision['barrier']}/abort", json={"reason": "test"})
    assert response.status_code == 200, response.text
    return int(decision["barrier"])


def settle(pipeline: Pipeline, job: str) -> None:
    """Run the job until it has nothing left to process."""
    while pipeline.run(job)["action"] == "process":
        pass


def answer(pipeline: Pipeline, tables: list[str], consistency: str) -> dict[str, object]:
    response = pipeline.versions(tables, consistency)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_strong_steps_back_over_consecutive_aborted_barriers_of_the_component(pipeline: Pipeline) -> None:
    t1 = pipeline.run("enrich", orders=1, customers=1)["barrier"]
    for job in ("audit", "dims", "revenue"):
        settle(pipeline, job)
    t2 = aborted(pipeline, "enrich", orders=2)
    t3 = aborted(pipeline, "enrich", orders=3)
    assert t1 < t2 < t3
    for job in ("audit", "dims", "revenue"):
        settle(pipeline, job)
    # the root completed every barrier; the aborted range of its reader holds both later ones
    assert answer(pipeline, [ORDERS], "weak") == {"consistency": "weak", "barrier": t3, "versions": {ORDERS: 3}}
    expected = {"consistency": "strong", "barrier": t1, "versions": {ORDERS: 1, AUDIT: 0}}
    assert answer(pipeline, [ORDERS, AUDIT], "strong") == expected
    assert answer(pipeline, [AUDIT], "weak")["barrier"] == t3
    # requested order is kept and duplicates are answered once
    both = answer(pipeline, [DIM, CUSTOMERS, DIM], "strong")
    assert list(both["versions"]) == [DIM, CUSTOMERS]  # type: ignore[call-overload]
    assert both["barrier"] == t1
    single = pipeline.api.get("/version/strong/lake/raw/customers").json()
    assert single == {"table": CUSTOMERS, "consistency": "strong", "barrier": t1, "snapshot_id": 1}
    # once a later barrier completes everywhere, strong answers move past the aborted ones
    t4 = pipeline.run("enrich", orders=4)["barrier"]
    for job in ("audit", "dims", "revenue"):
        settle(pipeline, job)
    strong = answer(pipeline, [REVENUE, ENRICHED], "strong")
    assert strong["barrier"] == t4 and strong["versions"] == {REVENUE: 1, ENRICHED: 1}
