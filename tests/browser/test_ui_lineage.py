"""The page's view of lineage through time, in a real Chromium against the live server: the graph as of an earlier
barrier and back to now, a snapshot's lineage tree, and freshness beside lag on each table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests import support
from tests.browser.page import DEADLINE, click, edges, text, visible
from tests.support import table_path
from tests.support.pipelines import (
    Flow,
)

pytestmark = pytest.mark.browser

R1, R2, A, B = "lake.raw.r1", "lake.raw.r2", "lake.mart.a", "lake.mart.b"
OLD_EDGE, NEW_EDGE = (f"table:{R1}", "job:j1"), (f"table:{R2}", "job:j1")


@pytest.fixture(name="chain")
def fx_chain(api: httpx.Client) -> tuple[Flow, int]:
    """r1 → j1 → a → j2 → b, one barrier through it: a@10 from r1@1, b@20 from a@10."""
    flow = Flow(api)
    flow.register("j1", sources=[R1], sinks=[A])
    flow.register("j2", sources=[A], sinks=[B])
    flow.report(R1, 1)
    b1 = flow.issue()
    assert flow.run("j1", {A: 10}) == b1
    assert flow.run("j2", {B: 20}) == b1
    return flow, b1


def ask_as_of(browser: webdriver.Chrome, value: str) -> None:
    field = browser.find_element(By.ID, "as-of")
    field.clear()
    field.send_keys(value, Keys.ENTER)


def past_barrier(browser: webdriver.Chrome) -> str | None:
    """The barrier the "showing the past" bar names; None while the page shows now."""
    if not visible(browser, "past"):
        return None
    return str(browser.execute_script("return document.getElementById('past').dataset.barrier"))


def test_as_of_an_earlier_barrier_shows_the_old_graph_and_now_the_new(
    api: httpx.Client, server: support.ServerProcess, browser: webdriver.Chrome, chain: tuple[Flow, int], tmp_path: Path
) -> None:
    flow, b1 = chain
    api.delete(f"/register/source/j1/{table_path(R1)}").raise_for_status()  # j1 now reads r2 instead of r1
    flow.register("j1", sources=[R2])
    flow.report(R2, 1)
    flow.issue()
    before = {(e["from"], e["to"]) for e in api.get("/lineage", params={"as_of": str(b1)}).json()["edges"]}
    now = {(e["from"], e["to"]) for e in api.get("/lineage").json()["edges"]}
    assert OLD_EDGE in before and NEW_EDGE not in before and NEW_EDGE in now and OLD_EDGE not in now

    browser.get(f"{server.base_url}/ui/")
    WebDriverWait(browser, DEADLINE).until(lambda b: edges(b) == now)
    assert past_barrier(browser) is None and not visible(browser, "as-of-now")

    ask_as_of(browser, str(b1))
    WebDriverWait(browser, DEADLINE).until(lambda b: edges(b) == before)
    assert past_barrier(browser) == str(b1) and visible(browser, "as-of-now")
    assert "Showing the past" in (text(browser, "past-text") or "")
    assert "in-past" in str(browser.find_element(By.TAG_NAME, "body").get_attribute("class"))
    shot = tmp_path / "ui-as-of.png"
    assert browser.save_screenshot(str(shot))
    print(f"screenshot: {shot}")

    click(browser, "#past-now")
    WebDriverWait(browser, DEADLINE).until(lambda b: edges(b) == now and past_barrier(b) is None)
    assert "as_of" not in browser.current_url

    # a time typed in: the edges that existed then (just before r1 was dropped), node states as of b1
    removal = next(c for c in api.get("/lineage/changes").json()["changes"] if c["change"] == "removed")
    at = datetime.fromisoformat(removal["at"]).astimezone(UTC)
    moment = at.replace(microsecond=at.microsecond // 1000 * 1000) - timedelta(milliseconds=1)  # whole ms, before it
    typed = moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"  # what a person would paste
    assert {(e["from"], e["to"]) for e in api.get("/lineage", params={"as_of": typed}).json()["edges"]} == before
    ask_as_of(browser, typed)
    WebDriverWait(browser, DEADLINE).until(lambda b: edges(b) == before and past_barrier(b) == str(b1))
    click(browser, "#as-of-now")
    WebDriverWait(browser, DEADLINE).until(lambda b: edges(b) == now and past_barrier(b) is None)

    # a lineage change in the side panel leads to the graph just before it took effect
    added = f"#changes li[data-barrier='{b1}']"
    assert click(browser, added, containing=R2).startswith("+")
    WebDriverWait(browser, DEADLINE).until(lambda b: edges(b) == before and past_barrier(b) == str(b1))

    # a value the server refuses: its message, and the page keeps showing what it showed
    refused = api.get("/lineage", params={"as_of": "last tuesday"})
    assert refused.status_code == 422
    ask_as_of(browser, "last tuesday")
    WebDriverWait(browser, DEADLINE).until(lambda b: visible(b, "as-of-error"))
    assert refused.json()["detail"] in (text(browser, "as-of-error") or "")
    assert edges(browser) == before and past_barrier(browser) == str(b1)


# The snapshot tree as (depth, table, snapshot, job, barrier) in document order.
_TREE = """
return [...document.querySelectorAll('#snapshot-lineage li.entry')].map((li) => {
  let depth = 0;
  for (let p = li.parentElement; p && p.id !== 'snapshot-lineage'; p = p.parentElement) if (p.tagName === 'LI') depth++;
  return [depth, li.dataset.table, li.dataset.snapshot, li.dataset.job, li.dataset.barrier];
});
"""


def flatten(entry: dict[str, Any], depth: int = 0) -> list[list[Any]]:
    row = [depth, entry["table"], str(entry["snapshot_id"]), entry["job"] or "", str(entry["barrier"] or "")]
    return [row] + [r for child in entry["inputs"] for r in flatten(child, depth + 1)]


def lag_of(browser: webdriver.Chrome, table: str) -> tuple[str, str] | None:
    script = """
    const t = document.querySelector(`#nodes g.node[data-id='${arguments[0]}'] text.lag`);
    return t ? [t.dataset.seconds, t.textContent] : null;
    """
    shown = browser.execute_script(script, f"table:{table}")
    return None if shown is None else (str(shown[0]), str(shown[1]))


def test_clicking_a_snapshot_shows_its_lineage_tree_and_tables_show_freshness_and_lag(
    api: httpx.Client,
    server: support.ServerProcess,
    browser: webdriver.Chrome,
    chain: tuple[Flow, int],
    tmp_path: Path,
) -> None:
    flow, b1 = chain
    expected = api.get(f"/tables/{table_path(B)}/snapshots/20/lineage", params={"depth": 4}).json()
    assert flatten(expected) == [
        [0, B, "20", "j2", str(b1)],
        [1, A, "10", "j1", str(b1)],
        [2, R1, "1", "", str(b1)],
    ]
    table = next(n for n in api.get("/lineage").json()["nodes"] if n["id"] == f"table:{B}")
    assert table["lag_seconds"] == 0 and table["freshness_seconds"] is not None

    browser.get(f"{server.base_url}/ui/?refresh=1")
    WebDriverWait(browser, DEADLINE).until(lambda b: lag_of(b, B) is not None)
    assert lag_of(browser, B) == ("0", "caught up")
    delay = f"return document.querySelector(\"#nodes g.node[data-id='table:{B}'] text.delay\").textContent"
    assert str(browser.execute_script(delay)).endswith(("ms", "s"))  # freshness

    click(browser, f"#nodes g.node[data-id='table:{B}']")
    WebDriverWait(browser, DEADLINE).until(lambda b: visible(b, "panel-snapshot"))
    assert text(browser, "panel-lag") == "caught up"
    click(browser, "#panel-snapshot")
    WebDriverWait(browser, DEADLINE).until(lambda b: len(b.execute_script(_TREE)) == 3)
    assert browser.execute_script(_TREE) == flatten(expected)
    shown = text(browser, "snapshot-lineage") or ""
    for name in (f"{B}@20", "j2", f"{A}@10", "j1", f"{R1}@1", "root, sealed by"):
        assert name in shown, name

    # an input snapshot leads on: its table is selected with that snapshot's own tree
    link = f"#snapshot-lineage li.entry[data-table='{A}'] > div.line > button.tree-table"
    click(browser, link)
    of_a = [[0, A, "10", "j1", str(b1)], [1, R1, "1", "", str(b1)]]
    WebDriverWait(browser, DEADLINE).until(lambda b: text(b, "panel-title") == "a" and b.execute_script(_TREE) == of_a)
    click(browser, f"#nodes g.node[data-id='table:{B}']")
    WebDriverWait(browser, DEADLINE).until(lambda b: text(b, "panel-title") == "b")
    click(browser, "#panel-snapshot")
    WebDriverWait(browser, DEADLINE).until(lambda b: len(b.execute_script(_TREE)) == 3)

    shot = tmp_path / "ui-snapshot-lineage.png"
    assert browser.save_screenshot(str(shot))
    print(f"screenshot: {shot}")

    # new root data a barrier sealed but no job has carried through yet: b falls behind, and the page says so on
    # its own (lag counts sealed root data: a report no barrier carries cannot be in any consistent version yet)
    flow.report(R1, 2)
    flow.issue()
    lag = next(n for n in api.get("/lineage").json()["nodes"] if n["id"] == f"table:{B}")["lag_seconds"]
    assert lag is not None and lag > 0
    WebDriverWait(browser, DEADLINE).until(lambda b: (lag_of(b, B) or ("", ""))[1].startswith("lag "))
    assert float(lag_of(browser, B)[0]) > 0  # type: ignore[index]
    panel_lag = "return Number(document.getElementById('panel-lag').dataset.seconds || 0)"
    WebDriverWait(browser, DEADLINE).until(lambda b: b.execute_script(panel_lag) > 0)
    assert len(browser.execute_script(_TREE)) == 3  # the tree survives the page's refreshes
