"""A real `metaservice serve` for a benchmark, and what it reports about the requests it served."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import httpx
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import conninfo_to_dict

from bench.cluster import WORK_DIR
from tests.support import ServerProcess


@contextmanager
def serving(database_url: str, *, workers: int = 1, env: Mapping[str, str] | None = None) -> Iterator[ServerProcess]:
    """Run the server with its default settings (same middleware, pool and logging as production) on a free port."""
    logs = WORK_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    name = conninfo_to_dict(database_url).get("dbname", "metaservice")
    server = ServerProcess(database_url, workers=workers, env=dict(env or {}), log_path=logs / f"{name}-w{workers}.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def served(base_url: str) -> dict[tuple[str, str, str], float]:
    """Requests served per (method, route, status) by the process answering this scrape (exact with one worker)."""
    return _counters(base_url, "metaservice_http_requests", ("method", "route", "status"))  # type: ignore[return-value]


def statements(base_url: str) -> dict[tuple[str, str], float]:
    """SQL statements run per (method, route) by the process answering this scrape, by the server's own tally
    (a coalesced allocation counts its share per request)."""
    return _counters(base_url, "metaservice_db_statements", ("method", "route"))  # type: ignore[return-value]


def next_answers(base_url: str) -> dict[str, float]:
    """Answers to `next` by action (process / wait / idle) from the process answering this scrape."""
    return {k[0]: v for k, v in _counters(base_url, "metaservice_next_answers", ("action",)).items()}


def _counters(base_url: str, family_name: str, labels: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    counts: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != family_name:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                counts[tuple(sample.labels[k] for k in labels)] = sample.value
    return counts


def served_between(before: Mapping[tuple[str, str, str], float], after: Mapping[tuple[str, str, str], float]) -> int:
    """How many requests (excluding the metrics scrapes themselves) were served between two scrapes."""
    return int(sum(v - before.get(k, 0.0) for k, v in after.items() if k[1] != "/metrics"))
