"""MetaServiceConsistencyTrigger: one event per new consistent barrier of a set of tables.

Used two ways:

- in an `AssetWatcher` (event-driven scheduling): it runs in the triggerer for as long as the DAG is deployed and
  emits one asset event per new consistent barrier, with the barrier and the snapshot ids in the event's extra
  (`extra["payload"]`). It keeps the last barrier it emitted in the asset's state store (Airflow >= 3.3), so a
  restarted triggerer goes on after it: no barrier twice, none missed.
- by `MetaServiceConsistencySensor` when deferred: the first event resumes the task.

Waiting is the server's long poll (`POST /versions` with `min_barrier` and `wait_seconds`, answered as soon as a
commit makes a newer version consistent); nothing sleeps while the server answers. A server that is down or
answers 503 delays the wait and never ends it before its timeout.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from metaservice_airflow._waiting import (
    DEFAULT_POLL_SECONDS,
    AsyncVersions,
    Found,
    WaitTimeout,
    check_bound,
    check_seconds,
    check_tables,
    wait_for_version,
)
from metaservice_airflow.hooks import DEFAULT_CONN_ID, MetaServiceHook, url_and_token

STATE_KEY_PREFIX = "metaservice_barrier"


def cursor_key(tables: Sequence[str], consistency: str) -> str:
    """The asset state store key of the last barrier emitted for (tables, consistency)."""
    digest = hashlib.sha256(json.dumps([sorted(tables), consistency]).encode()).hexdigest()[:16]
    return f"{STATE_KEY_PREFIX}:{digest}"


class MetaServiceConsistencyTrigger(BaseEventTrigger):
    """Fires once per new consistent barrier of `tables`: `{"status": "ok", "barrier", "snapshots", "tables",
    "consistency"}`.

    Args:
        tables: `catalog.database.table` names that must be consistent together.
        consistency: "strong" (default) or "weak".
        min_barrier: no event for a barrier below this one.
        max_staleness_seconds: the first event only for a version at most this old (by the database's clock);
            later events are for newer barriers anyway. Not with `min_barrier`.
        timeout_seconds: stop with `{"status": "timeout"}` when nothing came within this long (None: never;
            an asset watcher runs for ever).
        poll_seconds: the longest one long poll asks the server to wait (at most its `max_wait_seconds`).
        metaservice_conn_id: the `metaservice` connection.

    Raises:
        ValueError: a bad argument, when the DAG is parsed.

    Example:
        Asset("revenue_inputs", watchers=[AssetWatcher(
            name="revenue_inputs_consistent",
            trigger=MetaServiceConsistencyTrigger(tables=["lake.mart.orders_enriched", "lake.mart.customer_dim"]),
        )])
    """

    def __init__(
        self,
        *,
        tables: Sequence[str],
        consistency: str = "strong",
        min_barrier: int | None = None,
        max_staleness_seconds: float | None = None,
        timeout_seconds: float | None = None,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        metaservice_conn_id: str = DEFAULT_CONN_ID,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger is untyped
        self.tables = check_tables(tables)
        self.consistency, self.min_barrier, self.max_staleness_seconds = check_bound(
            consistency, min_barrier, max_staleness_seconds
        )
        self.timeout_seconds = check_seconds("timeout_seconds", timeout_seconds)
        self.poll_seconds = check_seconds("poll_seconds", poll_seconds, allow_none=False)
        if not isinstance(metaservice_conn_id, str) or not metaservice_conn_id:
            raise ValueError(f"metaservice_conn_id must be a connection id, got {metaservice_conn_id!r}")
        self.metaservice_conn_id = metaservice_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "tables": list(self.tables),
                "consistency": self.consistency,
                "min_barrier": self.min_barrier,
                "max_staleness_seconds": self.max_staleness_seconds,
                "timeout_seconds": self.timeout_seconds,
                "poll_seconds": self.poll_seconds,
                "metaservice_conn_id": self.metaservice_conn_id,
            },
        )

    # --- the cursor: the last barrier emitted, in the watched asset's state store ---------------------------

    def _store(self) -> Any:
        return getattr(self, "asset_state_store", None)

    async def _last_emitted(self) -> int | None:
        store = self._store()
        if store is None:
            return None
        key = cursor_key(self.tables, self.consistency)
        values = [await accessor.aget(key) for accessor in _accessors(store)]
        barriers = [int(v) for v in values if isinstance(v, int | str) and str(v).isdigit()]
        return max(barriers) if barriers else None

    async def _record(self, barrier: int) -> None:
        store = self._store()
        if store is None:
            return
        key = cursor_key(self.tables, self.consistency)
        for accessor in _accessors(store):
            await accessor.aset(key, barrier)

    # --- the events ---------------------------------------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Long-poll the server; one event per new consistent barrier (a task's trigger stops after the first)."""
        conn = await MetaServiceHook.aget_connection(self.metaservice_conn_id)
        url, token = url_and_token(conn)
        deadline = None if self.timeout_seconds is None else time.monotonic() + self.timeout_seconds
        last = await self._last_emitted()
        if last is not None:
            self.log.info(
                "MetaService: the last barrier emitted for %s was %d; waiting for a newer one", self.tables, last
            )
        api = AsyncVersions(url, token)
        try:
            while True:
                if last is not None:
                    bound: dict[str, Any] = {
                        "min_barrier": max(last + 1, self.min_barrier or 0),
                        "max_staleness_seconds": None,
                    }
                else:
                    bound = {"min_barrier": self.min_barrier, "max_staleness_seconds": self.max_staleness_seconds}
                try:
                    found = await wait_for_version(
                        api,
                        self.tables,
                        self.consistency,
                        deadline=deadline,
                        poll_seconds=self.poll_seconds or DEFAULT_POLL_SECONDS,
                        **bound,
                    )
                except WaitTimeout as exc:
                    yield TriggerEvent({"status": "timeout", "message": str(exc), "tables": list(self.tables)})  # type: ignore[no-untyped-call]
                    return
                self.log.info("MetaService: %s consistent at barrier %d", self.tables, found.barrier)
                yield TriggerEvent(self.payload(found))  # type: ignore[no-untyped-call]
                await self._record(found.barrier)
                last = found.barrier
        finally:
            await api.aclose()

    def payload(self, found: Found) -> dict[str, Any]:
        """The event's payload (an asset event's `extra["payload"]`, a resumed sensor's event)."""
        return {"status": "ok", **found.as_dict(), "tables": list(self.tables)}


def _accessors(store: Any) -> list[Any]:
    """The per-asset accessors of the triggerer's `AssetStateStoreAccessors` (one per watched asset)."""
    by_name = getattr(store, "_by_name", None)
    by_uri = getattr(store, "_by_uri", None)
    if isinstance(by_name, dict) and isinstance(by_uri, dict):
        return [*by_name.values(), *by_uri.values()]
    return [store]
