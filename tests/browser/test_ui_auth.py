"""The admin page against a server with authentication on, in a real Chromium: sign-in with a bearer token kept for
the tab, the server's own problem message for a bad token, sign-out, and a token revoked while the page is open."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from metaservice.db import migrate
from tests import support
from tests.browser.page import DEADLINE, click, nodes, text, visible
from tests.support import create_token
from tests.support.pipelines import (
    CUSTOMERS,
    DIAMOND,
    ORDERS,
    Driver,
)

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("ui-auth")]

# Everything the page could leave a token in, other than the tab's sessionStorage.
_TRACES = """
const storage = {};
for (let i = 0; i < localStorage.length; i++) storage[localStorage.key(i)] = localStorage.getItem(localStorage.key(i));
return {
  url: window.location.href,
  local: JSON.stringify(storage),
  cookie: document.cookie,
  fetched: performance.getEntriesByType('resource').map((e) => e.name),
  session: sessionStorage.getItem('metaservice-token'),
};
"""


class Secured:
    """A server with `--auth` on its own database, with an admin and a reader token and a seeded diamond."""

    def __init__(self, url: str, server: support.ServerProcess) -> None:
        self.url, self.server = url, server
        self.admin = create_token(url, "ui-admin", "admin")
        self.reader = create_token(url, "ui-reader", "reader")

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture(scope="module", name="secured")
def fx_secured(admin_url: str, worker_id: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    url = support.fresh_database(admin_url, f"ms_ui_auth_{worker_id}")
    migrate.upgrade(url)
    log = tmp_path_factory.mktemp("ui-auth") / "server.log"
    server = support.ServerProcess(url, env={"METASERVICE_AUTH_ENABLED": "true"}, log_path=log).start()
    try:
        secured = Secured(url, server)
        with secured.client(secured.admin) as admin:
            Driver(admin, DIAMOND).run("enrich", {ORDERS: 1, CUSTOMERS: 1})
        yield secured
    finally:
        server.stop()


def sign_in(browser: webdriver.Chrome, token: str) -> None:
    field = browser.find_element(By.ID, "auth-token")
    field.clear()
    field.send_keys(token)
    click(browser, "#auth-submit")


def graph_tables(secured: Secured) -> set[str]:
    with secured.client(secured.reader) as reader:
        return {n["id"] for n in reader.get("/lineage").json()["nodes"] if n["kind"] == "table"}


def test_sign_in_keeps_the_token_for_the_tab_only_and_sign_out_forgets_it(
    secured: Secured, browser: webdriver.Chrome
) -> None:
    tables = graph_tables(secured)
    assert len(tables) == 6
    browser.get(f"{secured.server.base_url}/ui/")
    WebDriverWait(browser, DEADLINE).until(lambda b: visible(b, "auth"))
    assert nodes(browser, "table") == [] and not visible(browser, "sign-out")
    assert not visible(browser, "auth-error")  # no token was offered yet: nothing is wrong

    sign_in(browser, "ms_not-a-token")
    WebDriverWait(browser, DEADLINE).until(lambda b: visible(b, "auth-error"))
    with httpx.Client(base_url=secured.server.base_url) as anonymous:
        refused = anonymous.get("/lineage", headers={"Authorization": "Bearer ms_not-a-token"}).json()["detail"]
    assert text(browser, "auth-error") == refused  # the server's own problem message
    assert nodes(browser, "table") == []
    assert browser.execute_script(_TRACES)["session"] is None  # a refused token is not kept

    sign_in(browser, secured.reader)
    WebDriverWait(browser, DEADLINE).until(lambda b: set(nodes(b, "table")) == tables)
    assert not visible(browser, "auth") and visible(browser, "sign-out")

    browser.refresh()  # same tab: still signed in
    WebDriverWait(browser, DEADLINE).until(lambda b: set(nodes(b, "table")) == tables)
    assert not visible(browser, "auth")
    click(browser, f"#nodes g.node[data-id='table:{ORDERS}']")
    WebDriverWait(browser, DEADLINE).until(lambda b: text(b, "panel-title") == "orders")  # panel calls carry it too

    traces = browser.execute_script(_TRACES)
    assert traces["session"] == secured.reader
    for place in ("url", "local", "cookie"):
        assert secured.reader not in traces[place], place
    assert traces["fetched"] and not [name for name in traces["fetched"] if secured.reader in name]

    click(browser, "#sign-out")
    WebDriverWait(browser, DEADLINE).until(lambda b: visible(b, "auth"))
    assert nodes(browser, "table") == [] and not visible(browser, "panel-body")  # nothing it showed stays on screen
    assert browser.execute_script(_TRACES)["session"] is None
    browser.refresh()
    WebDriverWait(browser, DEADLINE).until(lambda b: visible(b, "auth"))
    assert nodes(browser, "table") == []


def test_a_token_revoked_while_the_page_is_open_returns_it_to_sign_in(
    secured: Secured, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    token = create_token(secured.url, "ui-short-lived", "reader")
    tables = graph_tables(secured)
    browser.get(f"{secured.server.base_url}/ui/?refresh=1")
    WebDriverWait(browser, DEADLINE).until(lambda b: visible(b, "auth"))
    sign_in(browser, token)
    WebDriverWait(browser, DEADLINE).until(lambda b: set(nodes(b, "table")) == tables)

    command = [sys.executable, "-m", "metaservice", "token", "revoke", "ui-short-lived", "--database-url", secured.url]
    subprocess.run(command, check=True, timeout=60, capture_output=True)
    WebDriverWait(browser, DEADLINE).until(lambda b: visible(b, "auth"))  # the next refresh is refused
    assert text(browser, "auth-error") == "the token is unknown or revoked"
    assert nodes(browser, "table") == []
    assert browser.execute_script(_TRACES)["session"] is None
    shot = tmp_path / "sign-in.png"
    assert browser.save_screenshot(str(shot))
    print(f"screenshot: {shot}")
