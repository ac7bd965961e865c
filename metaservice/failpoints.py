"""Failpoints for the failure-injection and interleaving tests. Unset in production; reading one environment
variable per hit is the whole cost.

Crash failpoints: `METASERVICE_FAILPOINT=<name>` SIGKILLs the server there. Names: `before_commit` (a write did
its work but did not commit; for a single autocommit statement: before it is sent), `after_commit` (committed,
no response sent yet), `barrier_allocated` (a barrier was just allocated: the allocation is one autocommit
statement, so this is after its commit and before the request goes on; in `next`, before the job's own
transaction plans the barrier).

Pause points: with `METASERVICE_PAUSE_DIR=<dir>`, a request reaching `pause(name)` while `<dir>/<name>.armed`
exists claims that file (one request per arming), creates `<name>.arrived` and waits until `<name>.release`
exists. A test arms a point, waits for the arrival, does what must happen in between (another request, on this
process or another), then releases: an interleaving between two statements of one request, made exact.
Names: `plan_fetched` (a plan fetched more state than its gather held, before it is made again),
`step_gathered` (a protocol step gathered its job's state, before it plans), `settle_gathered` (a read's idle
completion gathered a writer's state, before it plans), `lineage_clock_held` (a lineage change or a table's
retirement holds the barrier clock in share mode, before it writes).
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import anyio

ENV = "METASERVICE_FAILPOINT"
PAUSE_ENV = "METASERVICE_PAUSE_DIR"
PAUSE_POLL_SECONDS = 0.005


def hit(name: str) -> None:
    """Die here, as a crashed server would, when the failpoint `name` is armed."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


async def pause(name: str) -> None:
    """Wait here until the test releases the point, when `name` is armed (see the module docstring)."""
    directory = os.environ.get(PAUSE_ENV)
    if not directory:
        return
    folder = Path(directory)
    try:  # an atomic rename: of concurrent requests, exactly one claims an arming
        (folder / f"{name}.armed").rename(folder / f"{name}.{uuid.uuid4().hex}.claimed")
    except FileNotFoundError:
        return
    (folder / f"{name}.arrived").touch()
    release = folder / f"{name}.release"
    while not release.exists():
        await anyio.sleep(PAUSE_POLL_SECONDS)
    release.unlink()
