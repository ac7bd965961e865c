"""What every benchmark gets: the bench PostgreSQL cluster and the size profile (full or `--quick`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from bench.cluster import Cluster

T = TypeVar("T")


@dataclass(frozen=True)
class Context:
    cluster: Cluster
    quick: bool = False

    def pick(self, full: T, quick: T) -> T:
        """`full` normally, `quick` under --quick (smaller catalogs, shorter load phases)."""
        return quick if self.quick else full

    @property
    def seconds(self) -> int:
        """Length of one measured load phase (wrk takes whole seconds)."""
        return self.pick(5, 2)

    @property
    def warmup(self) -> int:
        """Length of the unmeasured phase before it (connections and pools filled, code paths warm)."""
        return 1
