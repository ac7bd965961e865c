"""DAGs built by the tests, for `dag.test()`: Airflow 3 runs a DAG only once it is serialized from a file of the
DAGs folder, so each test writes a two-line DAG file that builds its DAG with the same function the test runs."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUILDERS: dict[str, Callable[[], Any]] = {}


def run_dag(dag_id: str, build: Callable[[], Any]) -> Any:
    """Write `dags/<dag_id>.py` (building the DAG with `build`), then `dag.test()` the DAG `build` makes: the
    triggerer runs inline, tasks run in this process. Returns the DagRun."""
    BUILDERS[dag_id] = build
    folder = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{dag_id}.py").write_text(
        f"# airflow DAG\nfrom dag_registry import BUILDERS\n\ndag = BUILDERS[{dag_id!r}]()\n"
    )
    dag = build()
    assert dag.dag_id == dag_id
    return dag.test()


def states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
