"""MetaServiceConsistencySensor: wait until tables have a consistent version meeting a bound, and hand it over."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout

from metaservice_airflow._waiting import (
    DEFAULT_POLL_SECONDS,
    AsyncVersions,
    WaitTimeout,
    check_bound,
    check_seconds,
    check_tables,
    wait_for_version,
)
from metaservice_airflow.hooks import DEFAULT_CONN_ID, MetaServiceHook
from metaservice_airflow.triggers import MetaServiceConsistencyTrigger


class MetaServiceConsistencySensor(BaseSensorOperator):
    """Wait until `tables` have a consistent version (at `min_barrier` or later, or at most
    `max_staleness_seconds` old), then return `{"barrier", "snapshots", "consistency", "tables"}` to XCom.

    Deferrable by default: while waiting, the task holds no worker slot; the triggerer long-polls the server. The
    downstream task reads exactly the snapshot ids returned (`ti.xcom_pull(task_ids=...)["snapshots"]`), even
    when newer versions were committed since. A server that is down or answers 503 delays the wait; only
    `timeout` ends it.

    Args:
        tables: `catalog.database.table` names that must be consistent together.
        consistency: "strong" (default) or "weak".
        min_barrier: a version at this barrier or later (templated: e.g. the barrier an upstream task committed).
        max_staleness_seconds: a version whose barrier is at most this old. Not with `min_barrier`.
        timeout: seconds to wait in all (the sensor's timeout; default 7 days).
        deferrable: wait in the triggerer (default) or in the worker.
        poll_seconds: the longest one long poll asks the server to wait (at most its `max_wait_seconds`).
        metaservice_conn_id: the `metaservice` connection.

    Raises:
        ValueError: a bad argument, when the DAG is parsed.

    Example:
        ready = MetaServiceConsistencySensor(task_id="inputs_ready", tables=["lake.mart.a", "lake.mart.b"],
                                             max_staleness_seconds=3600, timeout=2 * 3600)
    """

    template_fields: Sequence[str] = ("min_barrier",)
    ui_color = "#d9ecf2"

    def __init__(
        self,
        *,
        tables: Sequence[str],
        consistency: str = "strong",
        min_barrier: int | str | None = None,
        max_staleness_seconds: float | None = None,
        deferrable: bool = True,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        metaservice_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tables = check_tables(tables)
        templated = isinstance(min_barrier, str) and "{{" in min_barrier
        self.consistency, _, self.max_staleness_seconds = check_bound(
            consistency, None if templated else min_barrier, max_staleness_seconds
        )
        if templated and max_staleness_seconds is not None:
            raise ValueError("give min_barrier or max_staleness_seconds, not both")
        self.min_barrier = min_barrier
        check_seconds("timeout", self.timeout, allow_none=False)
        self.poll_seconds = check_seconds("poll_seconds", poll_seconds, allow_none=False) or DEFAULT_POLL_SECONDS
        self.deferrable = bool(deferrable)
        self.metaservice_conn_id = metaservice_conn_id

    def _rendered_min_barrier(self) -> int | None:
        value = self.min_barrier
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ValueError(f"min_barrier rendered to {self.min_barrier!r}, not a barrier") from None
        check_bound(self.consistency, value, self.max_staleness_seconds)
        return value

    def poke(self, context: Any) -> bool:
        """Not used: `execute` waits by long poll (deferred or not), never by pokes."""
        raise NotImplementedError("MetaServiceConsistencySensor waits by long poll; it has no poke")

    def execute(self, context: Any) -> dict[str, Any]:  # noqa: ARG002  # Airflow calls it with the context
        min_barrier = self._rendered_min_barrier()
        if self.deferrable:
            trigger = MetaServiceConsistencyTrigger(
                tables=self.tables,
                consistency=self.consistency,
                min_barrier=min_barrier,
                max_staleness_seconds=self.max_staleness_seconds,
                timeout_seconds=self.timeout,
                poll_seconds=self.poll_seconds,
                metaservice_conn_id=self.metaservice_conn_id,
            )
            self.defer(trigger=trigger, method_name="execute_complete", timeout=timedelta(seconds=self.timeout))
        url, token = MetaServiceHook(self.metaservice_conn_id).get_url_and_token()
        return asyncio.run(self._wait_here(url, token, min_barrier))

    async def _wait_here(self, url: str, token: str | None, min_barrier: int | None) -> dict[str, Any]:
        """Not deferred: the same long poll, in the worker."""
        api = AsyncVersions(url, token)
        try:
            found = await wait_for_version(
                api,
                self.tables,
                self.consistency,
                min_barrier=min_barrier,
                max_staleness_seconds=self.max_staleness_seconds,
                deadline=time.monotonic() + float(self.timeout),
                poll_seconds=self.poll_seconds,
            )
        except WaitTimeout as exc:
            raise AirflowSensorTimeout(str(exc)) from exc
        finally:
            await api.aclose()
        return {**found.as_dict(), "tables": list(self.tables)}

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:  # noqa: ARG002
        """Resumed by the trigger's event: the version to XCom, or the timeout as the sensor's failure."""
        if not event:
            raise AirflowException("MetaServiceConsistencySensor resumed without an event")
        if event.get("status") == "timeout":
            raise AirflowSensorTimeout(event.get("message", "timed out"))
        if event.get("status") != "ok":
            raise AirflowException(f"MetaService wait failed: {event}")
        self.log.info("tables %s consistent at barrier %s: %s", self.tables, event["barrier"], event["snapshots"])
        return {k: event[k] for k in ("barrier", "snapshots", "consistency", "tables")}
