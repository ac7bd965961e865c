"""What tests of several modules share: the test PostgreSQL, real server processes, HTTP and token helpers, and
pipelines driven through the API. `from tests import support` reaches every name below."""

from __future__ import annotations

from tests.support.auth import Token, create_token, revoke_token, secured_server
from tests.support.database import (
    REPO,
    admin_url,
    drop_database,
    fresh_database,
    hold_test_postgres,
    scratch_pg_dir,
    test_pg_dir,
    truncate,
    with_database,
)
from tests.support.http import (
    PROBLEM_JSON,
    Samples,
    assert_problem,
    by_label,
    metric,
    request_as,
    scrape,
    scrape_once,
    table_path,
)
from tests.support.process import ServerProcess, free_port, stop_group, wait_until

__all__ = [
    "PROBLEM_JSON",
    "REPO",
    "Samples",
    "ServerProcess",
    "Token",
    "admin_url",
    "assert_problem",
    "by_label",
    "create_token",
    "drop_database",
    "free_port",
    "fresh_database",
    "hold_test_postgres",
    "metric",
    "request_as",
    "revoke_token",
    "scrape",
    "scrape_once",
    "scratch_pg_dir",
    "secured_server",
    "stop_group",
    "table_path",
    "test_pg_dir",
    "truncate",
    "wait_until",
    "with_database",
]
