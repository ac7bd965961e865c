"""Real processes for the tests, the benchmarks and the demo: `metaservice serve` on a free port, waiting on real
conditions with a deadline, and stopping a process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll a real condition with a deadline (not a sleep used as synchronisation)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def stop_group(process: subprocess.Popen[Any], *, timeout: float) -> None:
    """SIGTERM the process group `process` leads (started with `start_new_session=True`), and SIGKILL it when it
    has not exited within `timeout` seconds."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@dataclass
class ServerProcess:
    """A real `metaservice serve` subprocess on a free port.

    Without a database URL it runs `serve --data-dir DATA_DIR`, which starts (and on exit stops) the embedded
    PostgreSQL there.
    """

    database_url: str | None
    workers: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    data_dir: Path | None = None
    args: tuple[str, ...] = ()  # more `serve` options, e.g. ("--insecure",)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 60) -> ServerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("METASERVICE_")}
        env.update(self.env)
        if self.database_url is not None:
            env["METASERVICE_DATABASE_URL"] = self.database_url
        elif self.data_dir is None:
            raise ValueError("give a database URL or a data dir for the embedded PostgreSQL")
        command = [
            sys.executable,
            "-m",
            "metaservice",
            "serve",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            *(["--data-dir", str(self.data_dir)] if self.database_url is None else []),
            *self.args,
        ]
        if self.log_path is None:
            self.process = subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
        else:
            with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
                self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        self.wait_ready(timeout=timeout)
        return self

    def ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"server exited with {self.process.returncode} (log: {self.log_path})")
        try:
            return httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, *, timeout: float = 60) -> None:
        wait_until(self.ready, timeout=timeout, what=f"server on port {self.port} to be ready")

    def kill(self) -> None:
        """SIGKILL the whole process group (uvicorn supervisor and workers), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process, timeout=15)
