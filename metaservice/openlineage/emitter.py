"""OpenLineage out: every barrier run that ends is sent as a RunEvent, in the background, never in the way.

Runs arrive through the request outbox (`runs.py`) into a bounded queue; when it is full the oldest run is
dropped and counted (`metaservice_openlineage_events_dropped_total`). A few sender tasks, started in the app's
lifespan, build each event with openlineage-python's own model classes, serialise it with its `Serde`, and POST
it with retries (connection errors, timeouts, 5xx, 408 and 429; jittered exponential backoff) through one
`httpx.AsyncClient`. Sent and given-up events are counted too. Nothing here runs on the request path but
`deliver`, which appends to the queue.

What a run becomes (docs/design.md, "OpenLineage"):
- job: `(openlineage_namespace, job id)`; run id: `uuid5(RUN_ID_NAMESPACE, "<namespace>/<job id>/<barrier>")`,
  the same for every process and every retry, so consumers merge duplicates;
- eventType COMPLETE for a commit; FAIL when the job aborted its barrier (it could not produce it), ABORT when
  the server did (a lineage change, unregister or rollback stopped the run from outside);
- inputs: each source at the snapshot the run read (standard `version` facet, plus `metaservice_snapshot` with
  `snapshotId` and `previousSnapshotId` as integers); outputs: each sink with the snapshot committed (none when
  aborted);
- run facets: `nominalTime` (the barrier as a time: barriers are µs since the epoch) and `metaservice_barrier`
  (barrier, status, who aborted and why); `parent` (OpenLineage's standard facet, `root` the same run: nothing
  tells the root apart) when the job named the run that started it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import ClassVar
from urllib.parse import urljoin

import attr
import httpx
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    InputDatasetFacet,
    OutputDatasetFacet,
    RunFacet,
    dataset_version_dataset,
    nominal_time_run,
    parent_run,
)
from openlineage.client.serde import Serde
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from metaservice import __version__
from metaservice.observability import OpenLineageCounters
from metaservice.openlineage.runs import EndedRun, ParentRun
from metaservice.settings import Settings

logger = logging.getLogger("metaservice.openlineage")

# Fixed forever: run ids must not change between versions (uuid5 of "<namespace>/<job id>/<barrier>").
RUN_ID_NAMESPACE = uuid.UUID("6f0e2a7c-4d0b-5b8e-9a51-3c2f1d7e8b90")
# Where the custom facets' JSON Schemas are named (a reserved .example domain: nothing is served there; the
# schema files are docs/openlineage/facets/*.json, whose `$id` is the same URL).
FACET_SCHEMA_BASE = "https://metaservice.example/openlineage/facets/1-0-0/"
PRODUCER = f"https://metaservice.example/metaservice/{__version__}"
SENDERS = 4  # events in flight at once: a slow endpoint must not cap events at one per round trip
MAX_BACKOFF_SECONDS = 30.0
SHUTDOWN_GRACE_SECONDS = 5.0  # longest a stopping server waits for the queue to empty (uvicorn's own grace is 10 s)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@attr.define
class BarrierRunFacet(RunFacet):
    """The MetaService barrier the run processed and how it ended."""

    barrier: int
    status: str  # committed | aborted
    abortedBy: str | None = None  # job | server
    reason: str | None = None

    _additional_skip_redact: ClassVar[list[str]] = ["barrier", "status", "abortedBy"]

    @staticmethod
    def _get_schema() -> str:
        return f"{FACET_SCHEMA_BASE}BarrierRunFacet.json#/$defs/BarrierRunFacet"


@attr.define
class SnapshotInputDatasetFacet(InputDatasetFacet):
    """The table snapshot the run read, and the one it read at its previous committed barrier."""

    snapshotId: int
    previousSnapshotId: int | None = None

    @staticmethod
    def _get_schema() -> str:
        return f"{FACET_SCHEMA_BASE}SnapshotInputDatasetFacet.json#/$defs/SnapshotInputDatasetFacet"


@attr.define
class SnapshotOutputDatasetFacet(OutputDatasetFacet):
    """The table snapshot the run committed."""

    snapshotId: int

    @staticmethod
    def _get_schema() -> str:
        return f"{FACET_SCHEMA_BASE}SnapshotOutputDatasetFacet.json#/$defs/SnapshotOutputDatasetFacet"


def run_id(namespace: str, job_id: str, barrier: int) -> uuid.UUID:
    """The OpenLineage run id of `job_id`'s run of `barrier`: stable, so a repeat is the same run."""
    return uuid.uuid5(RUN_ID_NAMESPACE, f"{namespace}/{job_id}/{barrier}")


def _time(unix_seconds: float) -> str:
    return datetime.fromtimestamp(unix_seconds, UTC).isoformat(timespec="microseconds")


def _barrier_time(barrier: int) -> str:
    """A barrier as the time it is (µs since the epoch), exactly: a float would round the last digits."""
    return (_EPOCH + timedelta(microseconds=barrier)).isoformat(timespec="microseconds")


def _version(snapshot: int) -> dataset_version_dataset.DatasetVersionDatasetFacet:
    return dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(snapshot), producer=PRODUCER)


def _parent(parent: ParentRun) -> parent_run.ParentRunFacet:
    """The standard parent facet; the root is the parent too, as OpenLineage's Spark integration does when it is
    given a parent alone."""
    return parent_run.ParentRunFacet(
        run=parent_run.Run(runId=parent.run_id),
        job=parent_run.Job(namespace=parent.namespace, name=parent.name),
        root=parent_run.Root(
            run=parent_run.RootRun(runId=parent.run_id),
            job=parent_run.RootJob(namespace=parent.namespace, name=parent.name),
        ),
        producer=PRODUCER,
    )


def build_event(run: EndedRun, *, namespace: str, dataset_namespace: str) -> RunEvent:
    """The RunEvent describing `run` (openlineage-python's model; `Serde.to_json` gives the wire form)."""
    if run.status == "committed":
        state = RunState.COMPLETE
    else:
        state = RunState.FAIL if run.aborted_by == "job" else RunState.ABORT
    inputs = []
    for table, read in sorted(run.inputs.items()):
        snapshot, previous = int(read["snapshot_id"]), read.get("previous_snapshot_id")
        inputs.append(
            InputDataset(
                namespace=dataset_namespace,
                name=table,
                facets={"version": _version(snapshot)},
                inputFacets={
                    "metaservice_snapshot": SnapshotInputDatasetFacet(
                        snapshotId=snapshot, previousSnapshotId=previous, producer=PRODUCER
                    )
                },
            )
        )
    outputs = []
    for table, written in sorted(run.outputs.items()):
        if written is None:
            outputs.append(OutputDataset(namespace=dataset_namespace, name=table))
            continue
        outputs.append(
            OutputDataset(
                namespace=dataset_namespace,
                name=table,
                facets={"version": _version(written)},
                outputFacets={
                    "metaservice_snapshot": SnapshotOutputDatasetFacet(snapshotId=written, producer=PRODUCER)
                },
            )
        )
    facets: dict[str, RunFacet] = {
        "nominalTime": nominal_time_run.NominalTimeRunFacet(
            nominalStartTime=_barrier_time(run.barrier), producer=PRODUCER
        ),
        "metaservice_barrier": BarrierRunFacet(
            barrier=run.barrier, status=run.status, abortedBy=run.aborted_by, reason=run.reason, producer=PRODUCER
        ),
    }
    if run.parent is not None:
        facets["parent"] = _parent(run.parent)
    return RunEvent(
        eventType=state,
        eventTime=_time(run.ended_at),
        run=Run(runId=str(run_id(namespace, run.job_id, run.barrier)), facets=facets),
        job=Job(namespace=namespace, name=run.job_id),
        inputs=inputs,
        outputs=outputs,
        producer=PRODUCER,
    )


class Rejected(Exception):
    """The endpoint answered an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:200]}")
        self.status = status


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, Rejected):
        return exc.status >= 500 or exc.status in (408, 429)
    return isinstance(exc, httpx.TransportError)


class OpenLineageEmitter:
    """The bounded queue of ended runs and the tasks that send them. One per server process."""

    def __init__(self, settings: Settings, counters: OpenLineageCounters) -> None:
        assert settings.openlineage_url is not None
        self.url = urljoin(settings.openlineage_url, settings.openlineage_endpoint)
        self.namespace = settings.openlineage_namespace
        self.dataset_namespace = settings.openlineage_dataset_namespace or settings.openlineage_namespace
        self.counters = counters
        self._settings = settings
        self._queue: asyncio.Queue[EndedRun] = asyncio.Queue(maxsize=settings.openlineage_queue_size)
        self._sending = 0  # runs taken from the queue whose sending has not ended

    def deliver(self, runs: Sequence[EndedRun]) -> None:
        """Queue runs to send (never waits): a full queue drops its oldest run."""
        for run in runs:
            if self._queue.full():
                self._queue.get_nowait()
                self._queue.task_done()
                self.counters.dropped.inc()
            self._queue.put_nowait(run)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Send in the background while the block runs; on the way out, wait a little for the queue to empty
        (a send timeout, at most `SHUTDOWN_GRACE_SECONDS`), then give up what is left (counted as dropped)."""
        settings = self._settings
        headers = {"Content-Type": "application/json"}
        if settings.openlineage_api_key is not None:
            headers["Authorization"] = f"Bearer {settings.openlineage_api_key.get_secret_value()}"
        timeout = httpx.Timeout(settings.openlineage_timeout_seconds)
        async with httpx.AsyncClient(headers=headers, timeout=timeout, follow_redirects=False) as client:
            senders = [
                asyncio.create_task(self._send_forever(client), name=f"metaservice-openlineage-{i}")
                for i in range(SENDERS)
            ]
            logger.info("sending OpenLineage events to %s (namespace %r)", self.url, self.namespace)
            try:
                yield
            finally:
                try:
                    grace = min(settings.openlineage_timeout_seconds, SHUTDOWN_GRACE_SECONDS)
                    await asyncio.wait_for(self._queue.join(), timeout=grace)
                except TimeoutError:
                    left = self._queue.qsize() + self._sending
                    if left:
                        self.counters.dropped.inc(left)
                        logger.warning("%d OpenLineage event(s) not sent before shutdown", left)
                for task in senders:
                    task.cancel()
                await asyncio.gather(*senders, return_exceptions=True)

    async def _send_forever(self, client: httpx.AsyncClient) -> None:
        while True:
            run = await self._queue.get()
            self._sending += 1
            try:
                await self._send(client, run)
            finally:
                self._sending -= 1
                self._queue.task_done()

    async def _send(self, client: httpx.AsyncClient, run: EndedRun) -> None:
        settings = self._settings
        try:
            body = Serde.to_json(build_event(run, namespace=self.namespace, dataset_namespace=self.dataset_namespace))
            retrying = AsyncRetrying(
                stop=stop_after_attempt(settings.openlineage_attempts),
                wait=wait_exponential_jitter(initial=settings.openlineage_backoff_seconds, max=MAX_BACKOFF_SECONDS),
                retry=retry_if_exception(_transient),
                reraise=True,
            )
            async for attempt in retrying:
                with attempt:
                    response = await client.post(self.url, content=body)
                    if response.is_error:
                        raise Rejected(response.status_code, response.text)
        except Exception as exc:  # the endpoint's failure (or a bug building the event) must not stop the sender
            self.counters.failed.inc()
            logger.warning(
                "OpenLineage event for job %r barrier %d not sent: %s: %s",
                run.job_id,
                run.barrier,
                type(exc).__name__,
                exc,
            )
            return
        self.counters.sent.inc()
