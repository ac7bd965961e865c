"""Crash failpoints for the failure-injection tests: `METASERVICE_FAILPOINT=<name>` SIGKILLs the server there.

Names: `before_commit` (a write did its work but did not commit; for a single autocommit statement: before it is
sent), `after_commit` (committed, no response sent yet), `barrier_allocated` (a barrier was just allocated: the
allocation is one autocommit statement, so this is after its commit and before the request goes on; in `next`,
before the job's own transaction plans the barrier).
Unset in production; reading one environment variable per write transaction is the whole cost.
"""

from __future__ import annotations

import os
import signal

ENV = "METASERVICE_FAILPOINT"


def hit(name: str) -> None:
    """Die here, as a crashed server would, when the failpoint `name` is armed."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
