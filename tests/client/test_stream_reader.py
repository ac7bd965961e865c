"""The `metaservice` stream source's reader as a Spark Python worker runs it (spark_client/streaming/source.py),
in a process of its own: what it does to the worker outlives the task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests import support

READ_TWICE = """
import gc, json, sys
from pyspark.sql.types import DoubleType, LongType, StructField, StructType
from spark_client.streaming.source import BarrierStreamReader, FilesPartition

options = {"job_id": "j", "table": "lake.raw.t", "url": "http://127.0.0.1:1", "catalog": "{}"}
schema = StructType([StructField("id", LongType()), StructField("v", DoubleType())])
reader = BarrierStreamReader(options, schema)
before = gc.get_freeze_count()
rows = [sum(b.num_rows for b in reader.read(FilesPartition([sys.argv[1]])))]
first = gc.get_freeze_count()
rows.append(sum(b.num_rows for b in reader.read(FilesPartition([sys.argv[1]]))))
second = gc.get_freeze_count()
gc.disable()
garbage = [[] for _ in range(1000)]
for cell in garbage:
    cell.append(cell)  # cycles made after the freeze: the collector still frees them
del garbage, cell
print(json.dumps({"before": before, "first": first, "second": second, "rows": rows, "collected": gc.collect(),
                  "http_loaded": "httpx" in sys.modules}))
"""


def test_the_first_read_in_a_worker_freezes_its_objects_once_and_loads_no_http_client(tmp_path: Path) -> None:
    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.table({"id": pa.array(range(1000), pa.int64()), "v": pa.array([1.5] * 1000)}), path)
    done = subprocess.run(
        [sys.executable, "-c", READ_TWICE, str(path)],
        cwd=support.REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["rows"] == [1000, 1000]
    # pyspark's daemon collects after every task: frozen, the worker's modules are not scanned again
    assert seen["before"] == 0 and seen["first"] > 10_000
    assert seen["second"] == seen["first"]  # once per process: later tasks' objects stay collectable
    assert seen["collected"] >= 1000  # the cycles made after the freeze were collected
    assert not seen["http_loaded"]  # only the driver's source process calls MetaService
