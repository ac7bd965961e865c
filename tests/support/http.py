"""Talking to a real server in tests: table paths, problem documents, tokens on requests, and /metrics."""

from __future__ import annotations

import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.support.process import wait_until

PROBLEM_JSON = "application/problem+json"
Samples = dict[str, list[Sample]]


def table_path(table: str) -> str:
    """`catalog.database.table` as the three path segments of the API."""
    return table.replace(".", "/")


def assert_problem(response: httpx.Response, status: int, code: str, *, names: tuple[str, ...] = ()) -> dict[str, Any]:
    """Assert an RFC 9457 problem document with our `code`, whose `detail` names each of `names`; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body = dict(response.json())
    assert body["status"] == status
    assert body["code"] == code, body
    assert body["type"] == f"/problems/{code}"
    assert body["instance"] == response.request.url.path
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str)
    for name in names:
        assert name in body["detail"], (name, body["detail"])
    return body


def request_as(base: str, token: str | None, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request to `base` + `path`, with `token` as its bearer token (None: no Authorization header)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, base + path, headers=headers, timeout=30, **kwargs)


def scrape_once(api: httpx.Client) -> Samples:
    """Every sample of one `GET /metrics`, by sample name."""
    response = api.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def scrape(api: httpx.Client) -> Samples:
    """A scrape whose database figures were read after this call started (they are refreshed in the background:
    wait for the condition, with a deadline)."""
    since = time.time()
    found: list[Samples] = []

    def fresh() -> bool:
        samples = scrape_once(api)
        read_at = samples.get("metaservice_figures_read_timestamp_seconds")
        if read_at and read_at[0].value >= since:
            found.append(samples)
            return True
        return False

    wait_until(fresh, timeout=30, what="/metrics figures read after the actions")
    return found[-1]


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """The values of the samples called `name`, by the value of their `label`."""
    return {s.labels[label]: s.value for s in samples.get(name, [])}


def metric(base_url: str, name: str) -> float:
    """The value of the first sample called `name` in the server's /metrics."""
    response = httpx.get(f"{base_url}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not in /metrics")
