"""Reading what the admin page shows, in one script per question so a refresh cannot leave a test holding stale
elements; and where the system's Chromium lives."""

from __future__ import annotations

import shutil
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

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


def click(browser: webdriver.Chrome, css: str, containing: str = "") -> str:
    """Find and click in one step, the first element matching `css` whose text holds `containing`; and the text it
    had. The page redraws on its own, so an element found a moment ago may be replaced before the click reaches it
    (Chromium answers "stale element reference" and clicks nothing): the whole step is then taken again, until
    DEADLINE. Every click in these tests goes through here; a bare find_element(...).click() is that race."""

    def attempt(b: webdriver.Chrome) -> tuple[str] | None:  # a tuple: an empty text must still end the wait
        for element in b.find_elements(By.CSS_SELECTOR, css):
            shown = str(element.text)
            if containing in shown:
                element.click()
                return (shown,)
        return None

    ignored = (StaleElementReferenceException, NoSuchElementException, ElementClickInterceptedException)
    found = WebDriverWait(browser, DEADLINE, ignored_exceptions=ignored).until(attempt)
    assert found is not None  # `until` returns only a truthy answer
    return found[0]
