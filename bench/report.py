"""Benchmark outcomes: table rows with goals, one JSON file per benchmark, and the printed summary table."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Row:
    """One line of the table: a measured figure, optionally against a same-run baseline and a goal."""

    measure: str
    value: str
    baseline: str = ""
    ratio: float | None = None
    goal: str = ""
    passed: bool | None = None  # None: informational, or not available


@dataclass
class Outcome:
    """What one benchmark measured: parameters, raw figures, table rows, notes (plans, profiles, caveats)."""

    name: str
    title: str
    parameters: dict[str, Any]
    figures: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def row(self, *args: Any, **kwargs: Any) -> None:
        self.rows.append(Row(*args, **kwargs))

    @property
    def passed(self) -> bool | None:
        verdicts = [r.passed for r in self.rows if r.passed is not None]
        return all(verdicts) if verdicts else None


def ms(value: float) -> str:
    return f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"


def rps(value: float) -> str:
    return f"{value:,.0f} req/s"


def mib(value: float) -> str:
    return f"{value / 2**20:.2f} MiB"


def machine() -> dict[str, Any]:
    """Where the figures were measured: hardware, software versions, and the commit under test."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines() if "model name" in ln), "")

    def run(*command: str) -> str:
        try:
            return subprocess.run(command, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return ""

    wrk = shutil.which("wrk")
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": model,
        "logical_cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "wrk": run(wrk, "-v").splitlines()[0] if wrk else None,
        "git_commit": run("git", "rev-parse", "HEAD"),
        "git_dirty_files": len(run("git", "status", "--porcelain").splitlines()),
    }


def write(outcome: Outcome, machine_info: dict[str, Any]) -> Path:
    """bench/results/<name>.json with machine info, parameters, raw figures, table rows, goals and verdict."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{outcome.name}.json"
    body = {
        "benchmark": outcome.name,
        "title": outcome.title,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(outcome.seconds, 1),
        "machine": machine_info,
        "parameters": outcome.parameters,
        "rows": [asdict(r) for r in outcome.rows],
        "passed": outcome.passed,
        "figures": outcome.figures,
        "notes": outcome.notes,
    }
    path.write_text(json.dumps(body, indent=2, default=str) + "\n")
    return path


def _verdict(passed: bool | None) -> str:
    return "" if passed is None else ("PASS" if passed else "FAIL")


def table(outcomes: list[Outcome]) -> Table:
    grid = Table(title="MetaService benchmarks (ratios against baselines measured in this run)", show_lines=False)
    for column in ("benchmark", "measure", "value", "baseline", "ratio", "goal", "result"):
        grid.add_column(column, overflow="fold")
    for outcome in outcomes:
        for i, r in enumerate(outcome.rows):
            grid.add_row(
                outcome.name if i == 0 else "",
                r.measure,
                r.value,
                r.baseline,
                "" if r.ratio is None else f"{r.ratio:.2f}",
                r.goal,
                _verdict(r.passed),
            )
        grid.add_section()
    return grid


def markdown(outcomes: list[Outcome]) -> str:
    lines = ["| benchmark | measure | value | baseline | ratio | goal | result |", "|---|---|---|---|---|---|---|"]
    for outcome in outcomes:
        for r in outcome.rows:
            ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
            cells = [outcome.name, r.measure.strip(), r.value, r.baseline, ratio, r.goal, _verdict(r.passed)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def console() -> Console:
    return Console(width=170, soft_wrap=False)
