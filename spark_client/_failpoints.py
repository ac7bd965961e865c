"""Crash-test failpoints: `METASERVICE_CLIENT_FAILPOINT=<name>` kills the driver with SIGKILL at that point."""

from __future__ import annotations

import os
import signal

ENV = "METASERVICE_CLIENT_FAILPOINT"


def hit(name: str) -> None:
    """Die right here, as a crashed driver would, when the failpoint `name` is armed."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
