"""An OpenLineage receiver for tests (a real HTTP server on a loopback socket), and MetaService servers that send
their events to one. Events are awaited by polling the receiver with a deadline."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from tests.support.process import ServerProcess, wait_until


class Capture:
    """An HTTP server on a free loopback port that records every POST. It answers the statuses queued in
    `answers` first, then 200. Serves while its `with` block runs."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.answers: list[int] = []
        self.lock = threading.Lock()
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with capture.lock:
                    capture.requests.append((self.path, dict(self.headers), body))
                    status = capture.answers.pop(0) if capture.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [body for _, _, body in self.requests]

    def wait_for(self, what: str, predicate: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
        wait_until(lambda: predicate(self.events()), timeout=30, what=what)
        return self.events()

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()
            self.answers.clear()


def start_server(database_url: str, log_dir: Path, **settings: str) -> ServerProcess:
    """A server process on `database_url` with these settings (`openlineage_url=capture.url`, ...)."""
    env = {f"METASERVICE_{name.upper()}": value for name, value in settings.items()}
    return ServerProcess(database_url, env=env, log_path=log_dir / f"server-{time.monotonic_ns()}.log").start()
