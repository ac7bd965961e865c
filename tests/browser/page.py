"""Reading what the admin page shows, in one script per question so a refresh cannot leave a test holding stale
elements; and where the system's Chromium lives."""

from __future__ import annotations

import shutil
from typing import Any

from selenium import webdriver
from selenium.webdriver.common.by import By

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
DEADLINE = 30.0


def nodes(browser: webdriver.Chrome, kind: str) -> list[str]:
    elements = browser.find_elements(By.CSS_SELECTOR, f"#nodes g.node[data-kind='{kind}']")
    return [str(e.get_attribute("data-id")) for e in elements]


def edges(browser: webdriver.Chrome) -> set[tuple[str, str]]:
    """The drawn edges as (from, to) node ids."""
    script = "return [...document.querySelectorAll('#edges path.edge')].map((e) => [e.dataset.from, e.dataset.to]);"
    return {(str(a), str(b)) for a, b in browser.execute_script(script)}


def visible(browser: webdriver.Chrome, element_id: str) -> bool:
    script = "const e = document.getElementById(arguments[0]); return !!e && e.getClientRects().length > 0;"
    return bool(browser.execute_script(script, element_id))


def text(browser: webdriver.Chrome, element_id: str) -> str | None:
    script = "const e = document.getElementById(arguments[0]); return e ? e.textContent : null;"
    value: Any = browser.execute_script(script, element_id)
    return None if value is None else str(value)
