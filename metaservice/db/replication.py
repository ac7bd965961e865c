"""Whether the primary replicates asynchronously, checked when a server starts (`metaservice serve` and the app's
lifespan): a failover to an asynchronous standby loses the unreplicated tail, barriers and commits MetaService
acknowledged included, so the server refuses to start on one unless `allow_async_replication` is set.

Asynchronous means: a physical standby streams from the primary (`pg_stat_replication`; logical walsenders, which
are connected to a database, are not standbys) and either none of them is `sync` or `quorum`, or
`synchronous_commit` is `off` or `local` (commits do not wait for any standby). No standby: nothing is replicated,
nothing to lose at a failover.

A role without `pg_read_all_stats` sees the walsenders' pids but NULL in every other column of
`pg_stat_replication`. Then the settings decide: with `synchronous_standby_names` empty no standby can be
synchronous (asynchronous); with it set and `synchronous_commit` on, `remote_write` or `remote_apply`, every commit
waits for the standbys it names, and the setup counts as synchronous (a streaming standby outside that list is the
operator's to keep from being promoted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

# Physical walsenders only: a logical one (a CDC consumer, a subscription) is connected to a database.
QUERY = """
SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
       coalesce((SELECT array_agg(coalesce(r.sync_state, '?') ORDER BY r.pid)
                   FROM pg_stat_replication r LEFT JOIN pg_stat_activity a ON a.pid = r.pid
                  WHERE a.datname IS NULL), '{}')
"""
SETTING = "METASERVICE_ALLOW_ASYNC_REPLICATION"


@dataclass(frozen=True)
class Replication:
    """What the primary says about its standbys (`states`: each physical standby's `sync_state`, '?' when hidden)."""

    synchronous_commit: str
    synchronous_standby_names: str
    states: tuple[str, ...]

    @classmethod
    def from_row(cls, row: tuple[Any, ...] | None) -> Replication:
        assert row is not None
        return cls(str(row[0]), str(row[1] or ""), tuple(str(s) for s in (row[2] or [])))

    @property
    def hidden(self) -> bool:
        """The role cannot see the standbys' sync state (no `pg_read_all_stats`)."""
        return "?" in self.states

    @property
    def asynchronous(self) -> bool:
        if not self.states:
            return False  # no standby: nothing replicated, nothing lost at a failover
        if self.synchronous_commit in ("off", "local") or not self.synchronous_standby_names.strip():
            return True
        if self.hidden:
            return False  # commits wait for the standbys synchronous_standby_names names
        return not any(state in ("sync", "quorum") for state in self.states)

    def describe(self) -> str:
        standbys = f"{len(self.states)} standby{'s' if len(self.states) != 1 else ''} streaming"
        seen = "sync state not visible to this role" if self.hidden else f"sync_state {', '.join(self.states)}"
        return (
            f"{standbys} ({seen}); synchronous_commit = {self.synchronous_commit}, "
            f"synchronous_standby_names = '{self.synchronous_standby_names}'"
        )

    def refusal(self) -> str:
        return (
            f"the primary replicates asynchronously ({self.describe()}): barriers, commits and snapshot reports "
            "MetaService acknowledged can be lost when a standby is promoted, and jobs then hold data for barriers "
            "the database no longer knows. Make the standby synchronous (synchronous_standby_names = '*', or "
            "'ANY 1 (s1, s2)' with two standbys, and synchronous_commit = on), or, if losing the newest acknowledged "
            f"work at a failover is acceptable, set {SETTING}=true (docs/failover.md)"
        )

    def warning(self) -> str:
        return (
            f"serving on asynchronous replication ({self.describe()}) because {SETTING} is set: barriers, commits "
            "and snapshot reports acknowledged shortly before a failover may be lost (docs/failover.md)"
        )


def inspect(conn: psycopg.Connection[Any]) -> Replication:
    """The primary's replication, read on `conn` (a connection to it)."""
    return Replication.from_row(conn.execute(QUERY).fetchone())


async def inspect_async(conn: psycopg.AsyncConnection[Any]) -> Replication:
    cursor = await conn.execute(QUERY)
    return Replication.from_row(await cursor.fetchone())


class AsyncReplication(RuntimeError):
    """The server refuses to start: the primary replicates asynchronously and the setting does not allow it."""
