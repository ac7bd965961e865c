"""Schemathesis against the live server over HTTP (PRODUCT.md guarantee 8: no input of any shape gives a 500).

Every operation of the OpenAPI document gets generated requests, valid and invalid (schemathesis' examples,
coverage and fuzzing phases in positive and negative mode), sent over HTTP to the worker's real `metaservice
serve`. Each answer must not be a server error and must conform to the document: a documented status code and
content type, and a body valid against the documented model.

The document is built from the app factory at collection time and a test pins it to what the live server
publishes. Each operation and generation mode is an ordinary pytest item running schemathesis' Hypothesis
strategy: schemathesis' own pytest collectors do not work with pytest 9 (the lazy `from_fixture` loader needs
`Node._nodeid`; `schema.parametrize()` gives every operation the same node id, so under xdist only one of them
runs and its failures are lost).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import Case, GenerationMode
from schemathesis import checks as st
from schemathesis.core.result import Err

from metaservice.app import create_app
from metaservice.settings import Settings
from tests import support
from tests.support.pipelines import seed_history

EXAMPLES_PER_OPERATION = 20
# Every check that applies to one request (the stateful and auth ones need links or credentials we do not have).
CHECKS = [
    st.not_a_server_error,
    st.status_code_conformance,
    st.content_type_conformance,
    st.response_headers_conformance,
    st.response_schema_conformance,
    st.negative_data_rejection,  # invalid input must get a 4xx
    st.positive_data_acceptance,  # input valid by the document must not get 422
    st.missing_required_header,
    st.unsupported_method,
    st.allow_header_conformance,
]
INT64_MAX = 2**63 - 1
# Freshness-bounded reads may wait up to the configured maximum for a version that never comes: the fuzzed server
# allows short waits only (the document publishes the maximum, so it is built with the same setting).
MAX_WAIT_SECONDS = "0.2"
# Only the document is used; no connection is ever made to this URL.
_DOCUMENT: dict[str, Any] = create_app(
    Settings(database_url="postgresql://unused/unused", max_wait_seconds=float(MAX_WAIT_SECONDS))
).openapi()


def _exact_int64_bounds(node: Any) -> Any:
    """FastAPI's OpenAPI models hold `maximum` as a float, so `le=2**63 - 1` is published as 9.223372036854776e18
    (2**63). Schemathesis then treats integers just above 2**63 - 1 as valid and flags the server's correct 422
    as "schema-valid request rejected". Restore the exact bound; nothing else of the document changes."""
    if isinstance(node, dict):
        fixed = {key: _exact_int64_bounds(value) for key, value in node.items()}
        if fixed.get("type") == "integer" and fixed.get("maximum") == float(2**63):
            fixed["maximum"] = INT64_MAX
        return fixed
    if isinstance(node, list):
        return [_exact_int64_bounds(item) for item in node]
    return node


schema = schemathesis.openapi.from_dict(_exact_int64_bounds(_DOCUMENT))


def _runs() -> list[tuple[str, GenerationMode]]:
    """(operation, mode) pairs; negative only where there is input to make invalid (a path, query or body)."""
    runs = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()  # the document itself is broken
        operation = result.ok()
        runs.append((operation.label, GenerationMode.POSITIVE))
        if len(operation.path_parameters) + len(operation.query) + len(operation.body) > 0:
            runs.append((operation.label, GenerationMode.NEGATIVE))
    return runs


def _seed(base_url: str) -> None:
    """A small pipeline with history, so list and detail answers carry real objects to validate."""
    with httpx.Client(base_url=base_url, timeout=30) as api:
        seed_history(api)
        second = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {"lake.raw.orders": 2}}).json()
        assert api.post(f"/jobs/enrich/barriers/{second['barrier']}/abort", json={"reason": "seed"}).status_code == 200


@pytest.fixture(scope="module", name="live")
def fx_live(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server on the worker's database with a seeded pipeline. Emptied before and after: pytest tears module
    fixtures down before a test of another module runs, so fuzzed state never leaks into other tests."""
    support.truncate(database_url)
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    server = support.ServerProcess(database_url, env={"METASERVICE_MAX_WAIT_SECONDS": MAX_WAIT_SECONDS}, log_path=log)
    server.start()
    try:
        _seed(server.base_url)
        yield server.base_url
    finally:
        server.stop()
        support.truncate(database_url)


def test_fuzzed_document_is_the_one_the_live_server_publishes(live: str) -> None:
    assert httpx.get(f"{live}/openapi.json").json() == _DOCUMENT


def _schemas(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _schemas(value)
    elif isinstance(node, list):
        for item in node:
            yield from _schemas(item)


def test_documented_maps_allow_only_the_keys_the_server_accepts() -> None:
    """Snapshot maps (`snapshots`, `root_snapshots`) accept only `catalog.database.table` keys: the server answers
    422 for any other key, so the document must say so (`additionalProperties: false` next to the key pattern).
    Otherwise clients and schemathesis take `{"snapshots": {"x": "y"}}` for a valid body."""
    loose = [
        sorted(node["patternProperties"])
        for node in _schemas(_DOCUMENT)
        if "patternProperties" in node and node.get("additionalProperties") is not False
    ]
    assert loose == []


def test_documented_maps_state_their_size_limits() -> None:
    """The server takes 1 to 1000 entries in a lease's `snapshots` and at most 1000 in any snapshot map; JSON Schema
    says that with `minProperties` / `maxProperties` (`minLength` means nothing for an object)."""
    maps = [node for node in _schemas(_DOCUMENT) if "patternProperties" in node]
    assert maps
    assert [node for node in maps if "minLength" in node or "maxLength" in node] == []
    assert [node.get("maxProperties") for node in maps] == [1000] * len(maps)


def test_every_operation_with_a_body_documents_413() -> None:
    """Bodies over `max_body_bytes` get 413 `payload_too_large` from every route; the document must list it."""
    undocumented = [
        f"{method.upper()} {route}"
        for route, operations in _DOCUMENT["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation and "413" not in operation["responses"]
    ]
    assert undocumented == []


def _only_whole_floats_refused(case: Case[Any], status: int, content: bytes) -> bool:
    """JSON Schema 2020-12 (OpenAPI 3.1) counts `2.0` as an integer, and schemathesis sends such whole floats for
    integer fields of JSON bodies. Our contract does not (API.md: ids and snapshots are JSON integers; issue 13:
    `1.0` and `1e3` are 422), and JSON Schema cannot say so. A 422 whose every error is about a whole float the
    body holds is that contract, not valid data rejected; any other error still fails the check."""
    if status != 422:
        return False
    errors = json.loads(content).get("errors", [])

    def sent(loc: list[str]) -> Any:
        value: Any = case.body
        for key in loc:  # down the body; a key it lacks names a union member (`start`: literal or integer)
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        return value

    return bool(errors) and all(
        e["loc"][:1] == ["body"] and isinstance(value := sent(e["loc"][1:]), float) and value.is_integer()
        for e in errors
    )


def _only_both_bounds_refused(status: int, content: bytes) -> bool:
    """`min_barrier` and `max_staleness_seconds` together are 422 (one bound or the other); query parameters cannot
    say "not both" in OpenAPI. A 422 whose every error is that rule is the contract; any other still fails."""
    if status != 422:
        return False
    errors = json.loads(content).get("errors", [])
    return bool(errors) and all("not both" in str(e.get("msg")) for e in errors)


def _only_cross_field_rules_refused(status: int, content: bytes) -> bool:
    """A body-level rule over several fields (POST /register/{job_id}: `new_roots` must be among `sources`) is a 422
    that JSON Schema cannot express. A 422 whose every error is such a rule on the whole body is the contract."""
    if status != 422:
        return False
    errors = json.loads(content).get("errors", [])
    return bool(errors) and all(
        e.get("loc") == ["body"] and str(e.get("msg", "")).startswith("Value error") for e in errors
    )


@pytest.mark.slow
@pytest.mark.parametrize(("label", "mode"), _runs(), ids=lambda value: str(value))
def test_no_input_gives_a_server_error_or_an_undocumented_answer(label: str, mode: GenerationMode, live: str) -> None:
    operation = schema.find_operation_by_label(label)
    assert operation is not None

    # No shrinking: every step is an HTTP call, and the failing input is reported as sent (with a curl command).
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(mode))
    def answers_within_the_contract(case: Case[Any]) -> None:
        response = case.call(base_url=live)
        checks = CHECKS
        if (
            _only_whole_floats_refused(case, response.status_code, response.content)
            or _only_both_bounds_refused(response.status_code, response.content)
            or _only_cross_field_rules_refused(response.status_code, response.content)
        ):
            checks = [check for check in CHECKS if check is not st.positive_data_acceptance]
        case.validate_response(response, checks=checks)

    answers_within_the_contract()
