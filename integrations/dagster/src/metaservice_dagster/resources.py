"""MetaServiceResource: the MetaService server as a Dagster resource."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from dagster import ConfigurableResource
from pydantic import Field

from spark_client._http import MetaServiceClient
from spark_client._retry import RetryPolicy
from spark_client.errors import NoConsistentVersion, NotFreshEnough
from spark_client.models import ConsistentVersions

Consistency = Literal["strong", "weak"]


class MetaServiceResource(ConfigurableResource["MetaServiceResource"]):
    """A MetaService server: its URL and a bearer token.

    Example:
        defs = Definitions(..., resources={"metaservice": MetaServiceResource(url="http://metaservice:8080",
                                                                              token=EnvVar("METASERVICE_TOKEN"))})
    """

    url: str = Field(description="The server's base URL, e.g. http://metaservice:8080.")
    token: str | None = Field(default=None, description="Bearer token (a reader token is enough); None: no auth.")
    timeout_seconds: float = Field(default=30.0, gt=0, description="Per request, on top of any long-poll wait.")
    retry_seconds: float = Field(
        default=20.0,
        gt=0,
        description="How long one call keeps trying while the server is down or answers 503 (then the sensor "
        "skips this evaluation and tries at the next one).",
    )

    def get_client(self) -> MetaServiceClient:
        """A `MetaServiceClient` for this server (close it, or use it as a context manager)."""
        retry = RetryPolicy(attempts=1_000, deadline=self.retry_seconds)
        return MetaServiceClient(self.url, self.token or "", retry=retry, timeout=self.timeout_seconds)

    def consistent_versions(
        self,
        tables: Sequence[str],
        consistency: Consistency = "strong",
        *,
        min_barrier: int | None = None,
        max_staleness_seconds: float | None = None,
        wait_seconds: float | None = None,
    ) -> ConsistentVersions | None:
        """The consistent version meeting the bound (waiting up to `wait_seconds` for it), None when there is none.

        Raises:
            Unavailable: the server stayed unreachable or busy for `retry_seconds`.
            MetaServiceError: the server refused the request (unknown table, bad name, auth).
        """
        with self.get_client() as client:
            try:
                return client.versions(
                    tables,
                    consistency,
                    min_barrier=min_barrier,
                    max_staleness_seconds=max_staleness_seconds,
                    wait_seconds=wait_seconds,
                )
            except (NoConsistentVersion, NotFreshEnough):
                return None

    def delay(self, table: str) -> dict[str, Any]:
        """`GET /tables/{c}/{d}/{t}/delay`: the table's freshness, lag and bottleneck job."""
        with self.get_client() as client:
            return client.delay(table)
