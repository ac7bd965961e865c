"""What `vacuum` may delete, decided in one place for every format.

The policy: MetaService names the oldest snapshot it protects (in-flight job inputs, live leases, the strong
version, the newest); the format may protect older ones of its own (Paimon consumers). Snapshots below that
floor may be expired (never the newest). A file that a remaining snapshot references stays; a file only
expired snapshots referenced goes; a file no snapshot ever referenced (a write that died before its commit, or
is still writing) goes only once it is older than `min_orphan_age_seconds`, so a write in progress is never
touched. Each format only reports what its snapshots reference and what lies in storage (`Storage`, listed with
modification times through the format's file system: local, or an object store), and expires its snapshots its
own way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark_client._http import MetaServiceClient


@dataclass(frozen=True)
class Storage:
    """What a format found in a table's storage for one retention floor.

    Attributes:
        files: the files snapshots reference or could have referenced (data files, manifests), as found in
            storage, with their modification times (seconds since the epoch).
        live: the files the snapshots that stay reference (the floor's and newer, tagged ones, ...).
        ever: the files any snapshot the table still lists references, expired ones included.
        abandoned: files no commit can reference any more (a dead write's staging directory), with their
            modification times: by age alone.
        expired: the metadata files of the snapshots expired (deleted first, so that no reader finds an
            expired snapshot whose files are gone).
        expire: the format's own expiry of the snapshots below the floor (a commit, a pointer moved).
        delete: deletes one file (through the format's file system).
    """

    files: Mapping[str, float]
    live: Collection[str]
    ever: Collection[str]
    abandoned: Mapping[str, float] = field(default_factory=dict)
    expired: Sequence[str] = ()
    expire: Callable[[], None] = field(default=lambda: None)
    delete: Callable[[str], None] = os.remove


def floor(client: MetaServiceClient, table: str, newest: int, *own: int | None) -> int:
    """The oldest snapshot of `table` that must stay: MetaService's oldest protected snapshot, the format's own
    protections (`own`), and never later than the newest snapshot."""
    oldest = client.retention(table).oldest_protected_snapshot_id
    lowest = newest if oldest is None else min(int(oldest), newest)
    return min([lowest, *(o for o in own if o is not None)])


def doomed(storage: Storage, *, min_orphan_age_seconds: float, now: float | None = None) -> list[str]:
    """The paths the policy deletes from `storage`, in deletion order (expired snapshots' metadata first)."""
    cutoff = (time.time() if now is None else now) - min_orphan_age_seconds
    out = list(storage.expired)
    out += [path for path, mtime in storage.abandoned.items() if mtime < cutoff]
    out += [
        path
        for path, mtime in storage.files.items()
        if path not in storage.live and (path in storage.ever or mtime < cutoff)
    ]
    return out


def apply(storage: Storage, paths: Sequence[str]) -> None:
    """Expire the snapshots below the floor, then delete `paths` in order."""
    storage.expire()
    for path in paths:
        storage.delete(path)
