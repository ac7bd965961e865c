"""Analysts' reads: several tables at one consistent version, protected from expiry while in use."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from spark_client._http import MetaServiceClient
from spark_client.catalog.base import Catalog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class ConsistentTables(Mapping[str, "DataFrame"]):
    """The DataFrames of a consistent read, with the barrier and snapshots they were read at."""

    def __init__(self, frames: Mapping[str, DataFrame], *, barrier: int, snapshots: Mapping[str, int]) -> None:
        self._frames, self.barrier, self.snapshots = dict(frames), barrier, dict(snapshots)

    def __getitem__(self, name: str) -> DataFrame:
        return self._frames[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._frames)

    def __len__(self) -> int:
        return len(self._frames)


@contextmanager
def consistent_tables(
    spark: SparkSession,
    client: MetaServiceClient,
    catalog: Catalog,
    names: Sequence[str],
    *,
    consistency: Literal["strong", "weak"] = "strong",
    holder: str | None = None,
    ttl_seconds: float = 600,
    min_barrier: int | None = None,
    max_staleness_seconds: float | None = None,
    wait_seconds: float | None = None,
) -> Iterator[ConsistentTables]:
    """Yield DataFrames of `names` at one consistent version; a lease keeps those snapshots from expiring.

    Args:
        names: tables to read together.
        consistency: "strong" (agrees with every other strong read of the pipeline) or "weak" (freshest).
        holder: lease holder name shown to admins (default: user@host:pid).
        ttl_seconds: lease lifetime; the lease is released when the block ends.
        min_barrier: read only a version at this barrier or later (see `MetaServiceClient.versions`).
        max_staleness_seconds: read only a version whose barrier is at most this old (database clock).
        wait_seconds: how long the server may wait for a version meeting the bound.

    Raises:
        NotFreshEnough: no version met the bound within `wait_seconds` (nothing was leased).

    Example:
        with consistent_tables(spark, client, catalog, ["lake.mart.a", "lake.mart.b"]) as tables:
            tables["lake.mart.a"].join(tables["lake.mart.b"], "id").count()
    """
    versions = client.versions(
        list(names),
        consistency,
        min_barrier=min_barrier,
        max_staleness_seconds=max_staleness_seconds,
        wait_seconds=wait_seconds,
    )
    lease = client.create_lease(holder or _default_holder(), versions.versions, ttl_seconds=ttl_seconds)
    try:
        frames = {name: catalog.read_at(spark, name, versions.versions[name]) for name in names}
        yield ConsistentTables(frames, barrier=versions.barrier, snapshots=versions.versions)
    finally:
        client.release_lease(lease.lease_id)


def _default_holder() -> str:
    return f"{os.environ.get('USER', 'reader')}@{os.uname().nodename}:{os.getpid()}"
