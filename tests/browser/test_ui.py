"""The admin page in a real headless Chromium against a live server with a seeded diamond pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests import support
from tests.browser.page import DEADLINE, click, nodes, visible
from tests.support import table_path
from tests.support.pipelines import (
    CUSTOMERS,
    DIAMOND,
    DIM,
    ENRICHED,
    ORDERS,
    REVENUE,
    Driver,
)

pytestmark = pytest.mark.browser

# Read in one script so a refresh re-rendering the panel cannot leave us holding stale elements.
_PANEL = """
const text = (id) => { const e = document.getElementById(id); return e ? e.textContent : null; };
const delay = document.getElementById('panel-delay');
return {title: text('panel-title'), bottleneck: text('panel-bottleneck'), runs: text('panel-runs'),
        delay: delay ? delay.dataset.seconds || null : null, delay_text: delay ? delay.textContent : null,
        steps: document.querySelectorAll('#panel-path li').length};
"""


def panel(browser: webdriver.Chrome) -> dict[str, Any]:
    return dict(browser.execute_script(_PANEL))


def classes(browser: webdriver.Chrome, node_id: str) -> set[str]:
    script = "return document.querySelector(`#nodes g.node[data-id='${arguments[0]}']`).getAttribute('class');"
    return set(str(browser.execute_script(script, node_id)).split())


def text_of(browser: webdriver.Chrome, node_id: str) -> str:
    script = "return document.querySelector(`#nodes g.node[data-id='${arguments[0]}'] text.meta`).textContent;"
    return str(browser.execute_script(script, node_id))


def test_page_draws_every_node_and_explains_a_clicked_table(
    api: httpx.Client, server: support.ServerProcess, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    pipeline = Driver(api, DIAMOND)
    pipeline.run("enrich", {ORDERS: 1, CUSTOMERS: 1})
    pipeline.run("audit")
    pipeline.run("dims", during=pipeline.busy)  # the slow job: the bottleneck of revenue_by_day
    pipeline.run("revenue")
    graph = api.get("/lineage").json()
    want_tables = {n["id"] for n in graph["nodes"] if n["kind"] == "table"}
    want_jobs = {n["id"] for n in graph["nodes"] if n["kind"] == "job"}
    expected = api.get(f"/tables/{table_path(REVENUE)}/delay").json()
    assert expected["bottleneck_job"] == "dims"

    browser.get(f"{server.base_url}/ui?refresh=1")  # redirected to /ui/; refresh every second
    WebDriverWait(browser, DEADLINE).until(
        lambda b: len(nodes(b, "table")) == len(want_tables) and len(nodes(b, "job")) == len(want_jobs)
    )
    assert browser.current_url.endswith("/ui/?refresh=1")
    assert not visible(browser, "auth") and not visible(browser, "sign-out")  # auth off: no sign-in at all
    assert set(nodes(browser, "table")) == want_tables and set(nodes(browser, "job")) == want_jobs
    assert len(browser.find_elements(By.CSS_SELECTOR, "#edges path.edge")) == len(graph["edges"])

    click(browser, f"#nodes g.node[data-id='table:{REVENUE}']")
    WebDriverWait(browser, DEADLINE).until(lambda b: panel(b)["bottleneck"])
    shown = panel(browser)
    assert shown["title"] == "revenue_by_day" and shown["bottleneck"] == "dims"
    assert float(shown["delay"]) >= expected["delay_seconds"]
    assert shown["delay_text"].endswith(("ms", "s"))
    assert shown["steps"] == len(expected["critical_path"])
    assert {"critical", "bottleneck"} <= classes(browser, "job:dims")
    assert {"critical", "hl"} <= classes(browser, f"table:{DIM}")
    assert "hl" not in classes(browser, "job:audit")  # neither up- nor downstream of revenue_by_day

    shot = tmp_path / "ui.png"
    assert browser.save_screenshot(str(shot))
    print(f"screenshot: {shot}")

    click(browser, "#nodes g.node[data-id='job:dims']")
    WebDriverWait(browser, DEADLINE).until(lambda b: panel(b)["runs"])
    assert panel(browser)["title"] == "dims" and "committed" in panel(browser)["runs"]

    # the page refreshes itself: a new barrier shows up without reloading
    pipeline.run("enrich", {ORDERS: 2})
    WebDriverWait(browser, DEADLINE).until(lambda b: text_of(b, f"table:{ENRICHED}").endswith("snap 1"))
    console: list[dict[str, str]] = browser.get_log("browser")  # type: ignore[no-untyped-call]
    severe = [entry for entry in console if entry["level"] == "SEVERE"]
    assert not severe, severe


def test_page_lays_out_a_graph_of_200_plus_nodes_left_to_right_without_overlaps(
    api: httpx.Client, server: support.ServerProcess, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    width, levels = 10, 10
    jobs: dict[str, tuple[list[str], list[str]]] = {}
    for level in range(1, levels + 1):
        for i in range(width):
            sources = [f"lake.l{level - 1}.t{i}", f"lake.l{level - 1}.t{(i + 1) % width}"]
            if i % 3 == 0:
                sources.append(f"lake.l{level - 1}.t{(i + 5) % width}")
            jobs[f"job_{level}_{i}"] = (sources, [f"lake.l{level}.t{i}"])
    pipeline = Driver(api, jobs)
    roots = {f"lake.l0.t{i}": 1 for i in range(width)}
    assert api.post("/barriers", json={"root_snapshots": roots}).status_code == 201
    for job in [name for name in jobs if int(name.split("_")[1]) <= 4]:
        pipeline.run(job)
    total = width * (levels + 1) + len(jobs)
    assert total > 200

    browser.get(f"{server.base_url}/ui/")
    WebDriverWait(browser, DEADLINE).until(lambda b: len(nodes(b, "table")) + len(nodes(b, "job")) == total)
    boxes: list[list[float]] = browser.execute_script(
        """
        return [...document.querySelectorAll('#nodes g.node')].map((g) => {
          const m = g.transform.baseVal.consolidate().matrix, r = g.querySelector('rect.shape');
          return [g.dataset.id, m.e, m.f, Number(r.getAttribute('width')), Number(r.getAttribute('height'))];
        });
        """
    )
    placed = {str(b[0]): (float(b[1]), float(b[2]), float(b[3]), float(b[4])) for b in boxes}
    ordered = sorted(placed.values())
    for i, (x, y, w, h) in enumerate(ordered):
        for x2, y2, _w2, h2 in ordered[i + 1 :]:
            if x2 >= x + w:
                break
            assert y2 >= y + h or y >= y2 + h2, "two nodes overlap"
    graph = api.get("/lineage").json()
    for edge in graph["edges"]:
        assert placed[edge["from"]][0] < placed[edge["to"]][0], f"edge drawn right to left: {edge}"

    shot = tmp_path / "ui-large.png"
    assert browser.save_screenshot(str(shot))
    print(f"screenshot: {shot}")


# Every table's drawn box and the free graph area (the canvas left of the side panel), in window pixels.
_BOXES = """
const canvas = document.getElementById('graph').getBoundingClientRect();
const panel = document.getElementById('panel').getBoundingClientRect();
const area = {left: canvas.left, top: canvas.top, right: Math.min(canvas.right, panel.left), bottom: canvas.bottom};
const tables = [...document.querySelectorAll("#nodes g.node[data-kind='table']")].map((g) => {
  const r = g.querySelector('rect.shape').getBoundingClientRect();
  return {id: g.dataset.id, left: r.left, top: r.top, right: r.right, bottom: r.bottom};
});
return {area, tables, panel_left: panel.left};
"""


def test_first_load_fits_every_table_beside_the_side_panel(
    api: httpx.Client, server: support.ServerProcess, browser: webdriver.Chrome
) -> None:
    # A long chain beside the diamond: wider than a laptop window at a readable zoom.
    chain = {f"step{i}": ([f"lake.chain.t{i}"], [f"lake.chain.t{i + 1}"]) for i in range(7)}
    pipeline = Driver(api, {**DIAMOND, **chain})
    pipeline.run("enrich", {ORDERS: 1, CUSTOMERS: 1})
    tables = {n["id"] for n in api.get("/lineage").json()["nodes"] if n["kind"] == "table"}
    browser.set_window_size(1100, 760)

    browser.get(f"{server.base_url}/ui/")
    WebDriverWait(browser, DEADLINE).until(lambda b: set(nodes(b, "table")) == tables)
    WebDriverWait(browser, DEADLINE).until(
        lambda b: b.execute_script("return document.getElementById('graph').dataset.loaded")
    )
    shown = browser.execute_script(_BOXES)
    area = shown["area"]
    assert area["right"] - area["left"] > 300, "the graph area is squeezed away"
    for box in shown["tables"]:
        inside = (
            area["left"] <= box["left"]
            and box["right"] <= area["right"]
            and area["top"] <= box["top"]
            and box["bottom"] <= area["bottom"]
        )
        assert inside, f"{box['id']} lies outside the visible graph area {area}: {box}"
        assert box["right"] <= shown["panel_left"], f"{box['id']} is under the side panel"
    assert not browser.find_element(By.ID, "minimap").is_displayed()  # everything is in view: no overview needed
