"""The concurrent model checker in `make test` (a short run); `make soak` runs it for 30 minutes across seeds.

Two real server processes on one database, several client threads (tests/checker/run.py), the history checked
afterwards (tests/checker/record.py). METASERVICE_CHECKER_SECONDS sets the run's length, METASERVICE_CHECKER_SEED
its seed (default: a fresh one, printed); read at import, before the suite's fixtures hide METASERVICE_*.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

from metaservice.db import migrate
from tests import support
from tests.checker.run import Checker

SECONDS = float(os.environ.get("METASERVICE_CHECKER_SECONDS") or 40)
SEED = os.environ.get("METASERVICE_CHECKER_SEED")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("checker")]


@pytest.fixture(name="two_servers")
def fx_two_servers(admin_url: str, worker_id: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    url = support.fresh_database(admin_url, f"ms_checker_{worker_id}")
    migrate.upgrade(url)
    log = tmp_path_factory.mktemp("checker") / "servers.log"
    servers = [support.ServerProcess(url, log_path=log).start() for _ in range(2)]
    try:
        yield [s.base_url for s in servers]
    finally:
        for s in servers:
            s.stop()


@pytest.mark.timeout(600 + 2 * SECONDS)
def test_concurrent_clients_on_two_server_processes_see_one_consistent_history(two_servers: list[str]) -> None:
    seed = int(SEED) if SEED else random.SystemRandom().randrange(2**32)
    checker = Checker(two_servers, seed=seed)
    problems = checker.run(SECONDS)
    summary = checker.figures.summary(checker.record)
    print("\n" + summary)
    replay = f"METASERVICE_CHECKER_SEED={seed} METASERVICE_CHECKER_SECONDS={SECONDS:g}"
    assert not problems, f"{len(problems)} problem(s) ({replay}); {summary}:\n" + "\n".join(problems[:40])
    figures = checker.figures
    assert figures.handed > 0 and figures.commits > 0 and figures.read_sets > 0, summary
    assert sum(figures.changes.values()) > 0, summary
