"""The versions handed to a run: the config an op takes to read exactly the snapshots of one barrier."""

from __future__ import annotations

from dagster import Config
from pydantic import Field


class MetaServiceVersions(Config):
    """One consistent barrier and the snapshot id of each table to read there.

    Example:
        @op
        def report(config: MetaServiceVersions) -> None:
            read_at(spark, "lake.mart.a", config.snapshots["lake.mart.a"])
    """

    barrier: int
    snapshots: dict[str, int]
    consistency: str = "strong"
    tables: list[str] = Field(default_factory=list)
