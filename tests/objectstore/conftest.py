"""A real S3-compatible server for the object-store tests: moto's server (`python -m moto.server`, the `dev`
extra's `moto[server]`) in a process of its own on a free port, one per test module, and a fresh bucket per test.

In its own process, not moto's `ThreadedMotoServer`: deltalake's object-store file system (`DeltaStorageHandler`)
holds the GIL while it waits for an answer, so a server thread of the test process could never answer it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import support

REGION = "us-east-1"
KEY, SECRET = "testing", "testing"  # moto accepts any credentials


@dataclass(frozen=True)
class S3Server:
    """A running moto S3 server and the credentials every client uses against it."""

    endpoint: str

    def filesystem(self) -> Any:
        """pyarrow's own S3 client: what stands in for Spark's s3a connector and checks the bucket independently
        of the format libraries' clients."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            endpoint_override=self.endpoint,
            access_key=KEY,
            secret_key=SECRET,
            region=REGION,
            scheme="http",
            allow_bucket_creation=True,
        )

    def delta_options(self) -> dict[str, str]:
        """deltalake's storage options (object_store keys)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def iceberg_options(self) -> dict[str, str]:
        """pyiceberg's FileIO properties."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": KEY,
            "s3.secret-access-key": SECRET,
            "s3.region": REGION,
        }

    def paimon_options(self) -> dict[str, str]:
        """pypaimon's catalog options."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key": KEY,
            "s3.secret-key": SECRET,
            "s3.region": REGION,
            "s3.path-style-access": "true",
        }


@pytest.fixture(scope="module", name="s3")
def fx_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    port = support.free_port()
    log = Path(tmp_path_factory.mktemp("moto")) / "moto.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    server = S3Server(f"http://127.0.0.1:{port}")

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"moto exited with {process.returncode} (log: {log})")
        try:
            return httpx.get(f"{server.endpoint}/moto-api/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        support.wait_until(ready, timeout=60, what="the moto S3 server")
        yield server
    finally:
        support.stop_group(process, timeout=15)


@pytest.fixture(name="bucket")
def fx_bucket(s3: S3Server) -> str:
    """A new, empty bucket."""
    name = f"lake-{uuid.uuid4().hex[:12]}"
    s3.filesystem().create_dir(name)
    return name
