"""Several replicas behind a balancer answer as one: the concurrent model checker (tests/checker) run through
haproxy (round robin, no stickiness) in front of two server processes on one database.

Commit hints, coalesced statements, the token cache and freshness waiters are per process; through the balancer
consecutive requests of one client land on different processes, so a hint or a waiter that only worked within one
process would show up in the checked history. The balancer runs the compose file's haproxy configuration with the
replicas' addresses swapped for the test servers' (the system's haproxy; the test's own round-robin balancer,
tests/failover/balancer.py, where haproxy is not installed).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from metaservice.db import migrate
from tests import support
from tests.checker.run import Checker
from tests.failover.balancer import Balancer

SECONDS = float(os.environ.get("METASERVICE_CHECKER_SECONDS") or 25)
SEED = os.environ.get("METASERVICE_CHECKER_SEED")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("checker")]


def compose_haproxy_config(listen: int, replicas: list[int]) -> str:
    """docker-compose.yml's haproxy configuration, bound to 127.0.0.1:`listen`, with its servers on `replicas`."""
    spec = yaml.safe_load((support.REPO / "docker-compose.yml").read_text())
    (mount,) = spec["services"]["balancer"]["configs"]
    config = str(spec["configs"][mount["source"]]["content"])
    config = re.sub(r"^(\s*)bind\s+\S+", rf"\g<1>bind 127.0.0.1:{listen}", config, flags=re.M)
    ports = iter(replicas)
    config = re.sub(
        r"^(\s*server\s+\S+\s+)\S+:\d+", lambda m: f"{m.group(1)}127.0.0.1:{next(ports)}", config, flags=re.M
    )
    assert next(ports, None) is None, "one server line per replica"
    return config


@contextmanager
def balanced(replicas: list[int], directory: Path) -> Iterator[str]:
    """A round-robin balancer in front of `replicas` (ports); yields its base URL."""
    port = support.free_port()
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        with Balancer(*replicas, port=port):
            yield f"http://127.0.0.1:{port}"
        return
    config = directory / "haproxy.cfg"
    config.write_text(compose_haproxy_config(port, replicas))
    with open(directory / "haproxy.log", "wb") as log:
        process = subprocess.Popen([haproxy, "-db", "-f", str(config)], stdout=log, stderr=log, start_new_session=True)
    try:

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        support.wait_until(up, timeout=30, what="haproxy to forward")
        yield f"http://127.0.0.1:{port}"
    finally:
        support.stop_group(process, timeout=10)


@pytest.mark.timeout(600 + 2 * SECONDS)
def test_replicas_behind_a_round_robin_balancer_answer_as_one(admin_url: str, worker_id: str, tmp_path: Path) -> None:
    url = support.fresh_database(admin_url, f"ms_replicas_{worker_id}")
    migrate.upgrade(url)
    servers = [support.ServerProcess(url, log_path=tmp_path / "servers.log") for _ in range(2)]
    try:
        for server in servers:
            server.start()
        with balanced([s.port for s in servers], tmp_path) as base:
            seed = int(SEED) if SEED else random.SystemRandom().randrange(2**32)
            checker = Checker([base], seed=seed)
            problems = checker.run(SECONDS)
        served = [requests_served(server.base_url) for server in servers]
    finally:
        for server in servers:
            server.stop()
        support.drop_database(admin_url, f"ms_replicas_{worker_id}")
    summary = checker.figures.summary(checker.record)
    print(f"\nthrough {'haproxy' if shutil.which('haproxy') else 'the test balancer'}: {summary}")
    replay = f"METASERVICE_CHECKER_SEED={seed} METASERVICE_CHECKER_SECONDS={SECONDS:g}"
    assert not problems, f"{len(problems)} problem(s) ({replay}); {summary}:\n" + "\n".join(problems[:40])
    figures = checker.figures
    assert figures.handed > 0 and figures.commits > 0 and figures.read_sets > 0, summary
    # Both processes must have served a large share, or a per-process shortcut would go unnoticed. The test
    # balancer (no haproxy) spreads connections, not requests, and a kept-alive connection carries as many
    # requests as its client sends: a 24 / 76 split happened (5,486 and 1,722 requests), so 10 % is the bound.
    assert min(served) > 0.1 * sum(served), f"the balancer spread {served} requests unevenly"


def requests_served(base_url: str) -> float:
    """API requests one server process answered (its /metrics)."""
    response = httpx.get(f"{base_url}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    return sum(
        sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "metaservice_http_requests_total" and sample.labels.get("route") != "/healthz"
    )
