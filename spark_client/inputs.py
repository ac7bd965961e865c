"""The inputs a transform receives: each source at exactly the barrier's snapshot."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from spark_client.catalog.base import Catalog, NotAppendOnly
from spark_client.errors import PermanentFailure
from spark_client.models import InputSnapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger("spark_client.job")

OnRewrite = Literal["fail", "full", "abort"]
"""What `Inputs.changes` does when the input was rewritten since the job's previous barrier."""
_ON_REWRITE = frozenset({"fail", "full", "abort"})


class Inputs(Mapping[str, "DataFrame"]):
    """Mapping from source table name to a DataFrame of that table at the barrier's snapshot.

    DataFrames are built lazily, on first access, so a transform that ignores an input never lists its files.
    The job remembers which inputs were read incrementally (`changes`), to refuse writing them with a
    whole-table `Overwrite` (that would keep only this barrier's rows).

    Example:
        def transform(inputs: Inputs) -> dict[str, DataFrame]:
            orders = inputs["lake.raw.orders"]             # the whole table at the barrier
            new = inputs.changes("lake.raw.orders")        # only rows added since the previous barrier
            return {"lake.mart.orders_enriched": new.withColumn("total", new.qty * new.price)}
    """

    def __init__(
        self,
        spark: SparkSession,
        catalog: Catalog,
        snapshots: Mapping[str, InputSnapshot],
        *,
        barrier: int,
        job_id: str = "",
    ) -> None:
        self._spark, self._catalog, self._snapshots = spark, catalog, dict(snapshots)
        self._frames: dict[str, DataFrame] = {}
        self.barrier, self.job_id = barrier, job_id
        self.incremental: set[str] = set()
        """Sources read with `changes` during this barrier."""
        self.rewritten: set[str] = set()
        """Sources `changes` read whole because they were rewritten (`on_rewrite="full"`)."""

    def __getitem__(self, name: str) -> DataFrame:
        self._check(name)
        if name not in self._frames:
            self._frames[name] = self._catalog.read_at(self._spark, name, self._snapshots[name].snapshot_id)
        return self._frames[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._snapshots)

    def __len__(self) -> int:
        return len(self._snapshots)

    def snapshot_id(self, name: str) -> int:
        """The snapshot of `name` this barrier reads.

        Example:
            version = inputs.snapshot_id("lake.raw.orders")
        """
        self._check(name)
        return self._snapshots[name].snapshot_id

    def changes(self, name: str, *, on_rewrite: OnRewrite = "fail") -> DataFrame:
        """Rows of an append-only source added since the job's previous barrier (everything the first time).

        Args:
            name: the source.
            on_rewrite: what to do when the source was rewritten in between (an overwrite, a merge, a restore:
                its changes are not just new rows). "fail" (default) raises `NotAppendOnly`, leaving the
                barrier in flight; the message says how to choose. "full" reads the source whole for this
                barrier (write with Merge, OverwritePartitions, ReplaceWhere or Overwrite, which do not add
                the old rows twice); `rewritten` then names it. "abort" gives this barrier up
                (`PermanentFailure`): the job aborts it, downstream skips it, and the next barrier counts
                changes from the last committed one again (so it helps when the rewrite is rolled back).

        Raises:
            NotAppendOnly: the source was rewritten and `on_rewrite` is "fail".
            PermanentFailure: the source was rewritten and `on_rewrite` is "abort".
            KeyError: `name` is not a source of the job.

        Example:
            new = inputs.changes("lake.raw.orders", on_rewrite="full")
        """
        self._check(name)
        if on_rewrite not in _ON_REWRITE:
            raise ValueError(f"on_rewrite must be one of {sorted(_ON_REWRITE)}, got {on_rewrite!r}")
        self.incremental.add(name)
        snapshot = self._snapshots[name]
        try:
            return self._catalog.read_changes(
                self._spark,
                name,
                after_snapshot_id=snapshot.previous_snapshot_id,
                snapshot_id=snapshot.snapshot_id,
            )
        except NotAppendOnly as exc:
            where = (
                f"job {self.job_id!r}, barrier {self.barrier}: input {name!r} was rewritten between snapshots "
                f"{snapshot.previous_snapshot_id} and {snapshot.snapshot_id}"
            )
            if on_rewrite == "full":
                logger.warning("%s; reading it whole for this barrier (on_rewrite='full')", where)
                self.rewritten.add(name)
                return self[name]
            if on_rewrite == "abort":
                raise PermanentFailure(f"{where}; giving the barrier up (on_rewrite='abort')") from exc
            raise NotAppendOnly(
                f"{where} (overwritten, merged or restored), so its changes are not just new rows. Choose what "
                f"the job does then: inputs.changes({name!r}, on_rewrite='full') reads it whole for this "
                "barrier (write with Merge, OverwritePartitions or Overwrite so old rows do not land twice), "
                "on_rewrite='abort' gives the barrier up. The barrier stays in flight until then.",
                table=name,
                after_snapshot_id=snapshot.previous_snapshot_id,
                snapshot_id=snapshot.snapshot_id,
            ) from exc

    def _check(self, name: str) -> None:
        if name not in self._snapshots:
            raise KeyError(f"{name!r} is not a source of job {self.job_id!r}; sources: {sorted(self._snapshots)}")
