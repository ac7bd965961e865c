"""Helpers of the interleaving tests: pause points armed from the test (metaservice/failpoints.py), two servers on
one database, requests sent from a thread while the test goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests import support

ARRIVAL_TIMEOUT = 30.0


@dataclass
class Pausepoints:
    """Arms, awaits and releases the servers' pause points in one directory."""

    directory: Path

    def arm(self, name: str) -> None:
        (self.directory / f"{name}.arrived").unlink(missing_ok=True)
        (self.directory / f"{name}.armed").touch()

    def wait_arrived(self, name: str) -> None:
        support.wait_until(
            (self.directory / f"{name}.arrived").exists, timeout=ARRIVAL_TIMEOUT, what=f"a request to reach {name}"
        )

    def armed(self, name: str) -> bool:
        return (self.directory / f"{name}.armed").exists()

    def release(self, name: str) -> None:
        (self.directory / f"{name}.arrived").unlink(missing_ok=True)
        (self.directory / f"{name}.release").touch()
        support.wait_until(
            lambda: not (self.directory / f"{name}.release").exists(),
            timeout=ARRIVAL_TIMEOUT,
            what=f"the paused request to leave {name}",
        )


@dataclass
class Background:
    """A request sent from a thread while the test goes on; `result()` joins it."""

    thread: threading.Thread
    box: dict[str, Any] = field(default_factory=dict)

    def result(self, timeout: float = 60.0) -> httpx.Response:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the paused request never answered"
        if "error" in self.box:
            raise self.box["error"]
        response: httpx.Response = self.box["response"]
        return response


@dataclass
class Servers:
    """Two servers on one database; `a` and `b` are clients to each."""

    processes: list[support.ServerProcess]
    pause: Pausepoints
    database_url: str
    a: httpx.Client = field(init=False)
    b: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.a = httpx.Client(base_url=self.processes[0].base_url, timeout=60)
        self.b = httpx.Client(base_url=self.processes[1].base_url, timeout=60)

    def in_background(self, call: Callable[[], httpx.Response]) -> Background:
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["response"] = call()
            except Exception as error:  # re-raised in the test's thread by result()
                box["error"] = error

        thread = threading.Thread(target=run, daemon=True)
        background = Background(thread, box)
        thread.start()
        return background

    def close(self) -> None:
        self.a.close()
        self.b.close()


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, f"{response.request.method} {response.request.url}: {response.text}"
    return response.json()


def path(table: str) -> str:
    return table.replace(".", "/")
