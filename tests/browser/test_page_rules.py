"""Rules for the browser tests themselves, checked without a browser: the page redraws on its own, so a test that
finds an element in one WebDriver call and clicks it in the next races the redraw (CI saw "stale element reference"
on the snapshot button). Clicks go through page.click, which finds and clicks in one retried step."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).parent


def test_no_browser_test_clicks_an_element_it_found_in_an_earlier_call() -> None:
    bare = re.compile(r"\.click\(\)")
    offenders = [
        f"{test.name}:{number}: {line.strip()}"
        for test in sorted(HERE.glob("test_*.py"))
        for number, line in enumerate(test.read_text().splitlines(), start=1)
        if bare.search(line) and test.name != Path(__file__).name
    ]
    assert offenders == [], "use tests.browser.page.click(browser, css) instead:\n" + "\n".join(offenders)
