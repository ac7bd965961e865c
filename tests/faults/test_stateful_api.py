"""schemathesis in stateful mode against a live server with authentication on: no sequence of calls gets a 500.

The OpenAPI document declares no `links`. schemathesis 4 infers them ("dependency-analysis" inference: a
response field or path parameter named like another operation's parameter), which gives the state machine
transitions such as `POST /jobs/{job_id}/barriers/next` → `.../{barrier}/commit` and `.../abort`,
`POST /barriers` → `GET /barriers/{barrier}`, `POST /leases` → renew / delete, `POST /rollbacks` → complete /
cancel, `GET /jobs` → the job's operations. Each scenario is a short random walk over those transitions, sent
over HTTP with an admin bearer token created by the `metaservice token create` command, and checked with
`not_a_server_error`. Bounded: a few dozen scenarios of a few steps. Every scenario starts from the same seeded
state (the database emptied and seeded again in `setup`): hypothesis checks that the same choices draw the same
way, and responses that grew with earlier scenarios (a longer `GET /leases` list feeding the delete link) made
it fail as a "flaky strategy". (tests/api/test_fuzz.py covers single
calls without auth, with schema conformance checks.)
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis import Case
from schemathesis.checks import not_a_server_error

from tests import support
from tests.faults.conftest import Servers
from tests.support.pipelines import seed_history

pytestmark = [pytest.mark.crash, pytest.mark.xdist_group("faults")]

SCENARIOS = 30
STEPS_PER_SCENARIO = 6


def create_admin_token(database_url: str) -> str:
    """An admin token made by the real command line, which prints the secret on its first line."""
    created = subprocess.run(
        [
            sys.executable,
            "-m",
            "metaservice",
            "token",
            "create",
            "fuzzer",
            "--role=admin",
            f"--database-url={database_url}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return created.stdout.splitlines()[0].strip()


@pytest.fixture(scope="module", name="live")
def fx_live(servers: Servers, faults_database: str) -> Iterator[tuple[str, str, str]]:
    """(base URL, admin token, database URL) of a seeded server that requires bearer tokens."""
    token = create_admin_token(faults_database)
    server = servers.start(faults_database, env={"METASERVICE_AUTH_ENABLED": "true"})
    with httpx.Client(base_url=server.base_url, timeout=30) as anonymous:
        denied = anonymous.get("/jobs")
        assert denied.status_code == 401 and denied.json()["code"] == "unauthorized", denied.text
    with httpx.Client(base_url=server.base_url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as api:
        seed_history(api)
    yield server.base_url, token, faults_database


def test_stateful_walks_with_a_token_never_get_a_server_error(live: tuple[str, str, str]) -> None:
    base_url, token, database_url = live
    auth = {"Authorization": f"Bearer {token}"}
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")  # the document this server publishes
    schema.config.generation.update(database="none")
    statuses: Counter[int] = Counter()

    class Walk(schema.as_state_machine()):  # type: ignore[misc]
        seen: ClassVar[Counter[int]] = statuses

        def setup(self) -> None:
            support.truncate(database_url)  # the token lives in api_tokens, which is kept
            with httpx.Client(base_url=base_url, timeout=30, headers=auth) as api:
                seed_history(api)

        def get_call_kwargs(self, case: Case[Any]) -> dict[str, Any]:  # noqa: ARG002 (an override)
            return {"base_url": base_url, "headers": auth, "timeout": 30}

        def after_call(self, response: Any, case: Case[Any]) -> None:  # noqa: ARG002 (an override)
            self.seen[response.status_code] += 1

        def validate_response(  # only the server-error check, whatever else the schema would check
            self,
            response: Any,
            case: Case[Any],
            additional_checks: Any = None,  # noqa: ARG002 (an override)
            **kwargs: Any,
        ) -> None:
            case.validate_response(response, checks=[not_a_server_error], transport_kwargs=kwargs)

    Walk.run(
        settings=settings(
            max_examples=SCENARIOS,
            stateful_step_count=STEPS_PER_SCENARIO,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
    )
    print(f"\nstateful walk: {sum(statuses.values())} calls, statuses {dict(sorted(statuses.items()))}")
    assert statuses[401] == 0 and statuses[403] == 0, f"the token was not honoured: {statuses}"
    assert sum(n for status, n in statuses.items() if status < 300) > 0, f"nothing succeeded: {statuses}"
    assert not [status for status in statuses if status >= 500], statuses
