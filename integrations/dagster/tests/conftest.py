"""The Dagster suite: a real Dagster instance (SQLite storage in a temporary DAGSTER_HOME), the MetaService
resource pointing at the real server tests/test_integrations.py started, and pipelines driven through it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dagster import DagsterInstance, instance_for_test

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testing"))

from metaservice_dagster import MetaServiceResource
from metaservice_pipeline import Chain, server_url


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as dagster_instance:
        yield dagster_instance


@pytest.fixture
def metaservice() -> MetaServiceResource:
    return MetaServiceResource(url=server_url())


@pytest.fixture
def api() -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url(), timeout=30) as client:
        yield client


@pytest.fixture
def chain(api: httpx.Client) -> Chain:
    return Chain(api)
