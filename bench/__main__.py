"""`python -m bench [names…] [--quick]`: run the benchmarks, print the table, write bench/results/<name>.json."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback

from bench import cluster, load, report
from bench.context import Context

# name → module; run in this order (cheap baselines first, Spark last)
BENCHMARKS = {
    "baselines": "bench.baselines",
    "barriers": "bench.barriers",
    "cycle": "bench.cycle",
    "workers": "bench.workers",
    "overload": "bench.overload",
    "versions": "bench.versions",
    "idle": "bench.idle",
    "allocation": "bench.allocation",
    "lineage": "bench.lineage",
    "orchestrators": "bench.orchestrators",  # the Airflow trigger, in the Airflow virtualenv (make venv-airflow)
    "spark_overhead": "bench.spark_overhead",  # with the table formats (bench/spark_formats.py)
    "streaming": "bench.streaming",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", choices=[[], *BENCHMARKS], metavar="name", help=", ".join(BENCHMARKS))
    parser.add_argument("--quick", action="store_true", help="smaller catalogs and shorter phases (development)")
    args = parser.parse_args(argv)
    names = args.names or list(BENCHMARKS)

    started = time.monotonic()
    load.ensure_wrk()
    machine = report.machine()
    ctx = Context(cluster.start(), quick=args.quick)
    machine["postgres"] = ctx.cluster.setting("server_version")
    outcomes: list[report.Outcome] = []
    failed: list[str] = []
    for name in names:
        print(f"bench: {name} …", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            outcome = importlib.import_module(BENCHMARKS[name]).run(ctx)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        outcome.seconds = time.monotonic() - t0
        outcome.parameters["quick"] = args.quick
        outcome.figures["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        path = report.write(outcome, machine)
        outcomes.append(outcome)
        print(f"bench: {name} done in {outcome.seconds:.0f}s → {path}", file=sys.stderr, flush=True)

    total = time.monotonic() - started
    console = report.console()
    console.print(report.table(outcomes))
    for outcome in outcomes:
        for note in outcome.notes:
            console.print(f"[bold]{outcome.name}[/bold]: {note}", highlight=False)
    console.print(f"total {total:.0f}s on {machine['logical_cpus']} CPUs ({machine['cpu_model']})", highlight=False)
    if not args.quick and set(names) == set(BENCHMARKS):
        (report.RESULTS / "summary.md").write_text(report.markdown(outcomes) + f"\nTotal run time: {total:.0f} s.\n")
    if failed:
        print(f"bench: failed to run: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
