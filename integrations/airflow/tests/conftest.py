"""The Airflow suite: a metadata database of its own (SQLite in a temporary AIRFLOW_HOME, made before Airflow
is imported), the `metaservice_default` connection pointing at the real server tests/test_integrations.py
started, and pipelines driven through that server's API."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testing"))

from metaservice_pipeline import Chain, server_url

_HOME = Path(tempfile.mkdtemp(prefix="metaservice-airflow-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(_HOME),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(_HOME / "dags"),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        # Airflow's OpenLineage provider on, as where MetaService's events nest under the tasks' runs: its listener
        # reports every task run to this file, its macros are there (the plugin is off without a transport)
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(_HOME / "openlineage.jsonl"), "append": True}
        ),
    }
)
OPENLINEAGE_EVENTS = _HOME / "openlineage.jsonl"


def connection_env(url: str, token: str | None = None) -> str:
    """An `AIRFLOW_CONN_*` value for a `metaservice` connection."""
    return json.dumps({"conn_type": "metaservice", "host": url, "password": token or ""})


@pytest.fixture(scope="session", autouse=True)
def airflow_db() -> Iterator[None]:
    """A migrated Airflow metadata database for the session."""
    from airflow.utils import db

    db.resetdb()
    yield


@pytest.fixture(autouse=True)
def metaservice_connection(monkeypatch: pytest.MonkeyPatch) -> str:
    url = server_url()
    monkeypatch.setenv("AIRFLOW_CONN_METASERVICE_DEFAULT", connection_env(url))
    return url


@pytest.fixture
def api() -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url(), timeout=30) as client:
        yield client


@pytest.fixture
def chain(api: httpx.Client) -> Chain:
    return Chain(api)
