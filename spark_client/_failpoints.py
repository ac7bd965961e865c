"""Crash-test failpoints: `METASERVICE_CLIENT_FAILPOINT=<name>` kills the driver with SIGKILL at that point.

Names in use: `after_files_written` (data files written, Delta log untouched), `after_delta_commit` (the
tagged commit is in the log, MetaService not told), `after_table_commit` (the same for Iceberg and Paimon) and
`before_metaservice_commit`; a streaming job's micro-batch also has `after_metaservice_commit` (MetaService holds
the commit, Spark does not know) and `before_spark_commit_log` (the micro-batch's last step before Spark records
it done).
"""

from __future__ import annotations

import os
import signal

ENV = "METASERVICE_CLIENT_FAILPOINT"


def hit(name: str) -> None:
    """Die right here, as a crashed driver would, when the failpoint `name` is armed.

    The variable is read at every call, so a test can arm a failpoint in a running process. SIGKILL gives
    no chance to clean up: no `finally`, no atexit, no Spark shutdown hook, exactly like `kill -9`.

    Args:
        name: the failpoint this call site stands for.

    Example:
        METASERVICE_CLIENT_FAILPOINT=after_delta_commit python my_job.py   # dies after the Delta commit
    """
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
