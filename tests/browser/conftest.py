"""A real headless Chromium for the page's tests (Debian's chromium and chromedriver), one fresh profile per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.browser.page import CHROMEDRIVER, CHROMIUM


@pytest.fixture(name="browser")
def fx_browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    """Headless Chromium from the system packages, with a fresh profile; skipped (never silently) when missing."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        reason = "chromium not installed: apt-get install chromium chromium-driver"
        if os.environ.get("METASERVICE_REQUIRE_BROWSER"):
            pytest.fail(reason)
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1500,900",
        f"--user-data-dir={tmp_path / 'chrome-profile'}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
