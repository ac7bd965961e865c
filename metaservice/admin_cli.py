"""Admin commands over HTTP: `metaservice lineage|delays|job|abort|barrier|retire|revive|rollback …`.

They talk to a running server (`--url`, default $METASERVICE_URL, else http://127.0.0.1:8080) with its auth
(`--token`, default $METASERVICE_TOKEN), print readable tables, or the server's JSON answer with `--json`. A
refusal (a problem document), an unreachable server or a bad token is one line on stderr and exit status 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import httpx
import typer

DEFAULT_URL = "http://127.0.0.1:8080"

UrlOption = Annotated[
    str, typer.Option("--url", envvar="METASERVICE_URL", help="The server's base URL.", show_default=True)
]
TokenOption = Annotated[
    str | None,
    typer.Option("--token", envvar="METASERVICE_TOKEN", help="Bearer token (when the server has auth on)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the server's JSON answer instead of a table.")]
TableArgument = Annotated[str, typer.Argument(help="catalog.database.table", show_default=False)]


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=1)


class Api:
    """One server: requests with the token, problem documents turned into one-line errors."""

    def __init__(self, url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(60, connect=5))

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            _fail(f"cannot reach {self.url} ({type(exc).__name__}: {exc}); is the server running? (--url)")
        if response.is_error:
            try:
                problem = response.json()
            except ValueError:
                _fail(f"{method} {path}: HTTP {response.status_code}")
            if not isinstance(problem, dict):
                _fail(f"{method} {path}: HTTP {response.status_code}")
            hint = " (--token or METASERVICE_TOKEN)" if response.status_code in (401, 403) else ""
            _fail(
                f"{problem.get('detail', response.reason_phrase)} [{problem.get('code', response.status_code)}]{hint}"
            )
        return response.json() if response.content else None


@contextmanager
def _api(url: str, token: str | None) -> Iterator[Api]:
    with Api(url, token) as api:
        yield api


def _path(table: str) -> str:
    parts = table.split(".")
    if len(parts) != 3 or not all(parts):
        _fail(f"table names are catalog.database.table, got {table!r}")
    return "/".join(parts)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


def table_text(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows as aligned columns under their headers."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _show(data: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else render(data))


def lineage(
    table: Annotated[str | None, typer.Argument(help="catalog.database.table; none: the whole graph")] = None,
    direction: Annotated[str, typer.Option(help="upstream, downstream or both")] = "both",
    depth: Annotated[int | None, typer.Option(help="job hops from the table")] = None,
    as_of: Annotated[str | None, typer.Option("--as-of", help="a barrier or an RFC 3339 time: the graph then")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """The lineage of a table (or all of it): each table with its writer, readers and newest complete barrier."""
    params: dict[str, str | int] = {"direction": direction}
    if table is not None:
        _path(table)
        params["table"] = table
    if depth is not None:
        params["depth"] = depth
    if as_of is not None:
        params["as_of"] = as_of
    with _api(url, token) as api:
        graph = api.call("GET", "/lineage", params=params)

    def render(g: dict[str, Any]) -> str:
        tables = [n for n in g["nodes"] if n["kind"] == "table"]
        jobs = {n["id"]: n for n in g["nodes"] if n["kind"] == "job"}
        writers: dict[str, str] = {}
        readers: dict[str, list[str]] = {}
        for e in g["edges"]:
            if e["from"] in jobs:
                writers[e["to"]] = jobs[e["from"]]["name"]
            else:
                readers.setdefault(e["from"], []).append(jobs[e["to"]]["name"])
        rows = [
            (
                n["name"],
                n["table_kind"],
                writers.get(n["id"]),
                sorted(readers.get(n["id"], [])),
                n["newest_complete_barrier"],
                n["freshness_seconds"],
            )
            for n in tables
        ]
        headers = ("table", "kind", "writer", "readers", "newest barrier", "freshness s")
        text = table_text(headers, rows)
        if g.get("as_of"):
            text = f"as of barrier {g['as_of']['barrier']} ({g['as_of']['time']})\n{text}"
        return text + ("\n(truncated: the node cap cut the graph short)" if g.get("truncated") else "")

    _show(graph, as_json, render)


def delays(
    table: Annotated[str | None, typer.Argument(help="catalog.database.table; none: every table, worst first")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every table's delay and bottleneck job, worst first; with a table, its critical path."""
    path = "/delays" if table is None else f"/tables/{_path(table)}/delay"
    with _api(url, token) as api:
        data = api.call("GET", path)

    def render_all(d: dict[str, Any]) -> str:
        rows = [
            (x["table"], x["barrier"], x["freshness_seconds"], x["lag_seconds"], x["bottleneck_job"])
            for x in d["delays"]
        ]
        return table_text(("table", "barrier", "freshness s", "lag s", "bottleneck"), rows)

    def render_one(d: dict[str, Any]) -> str:
        head = (
            f"{d['table']}: barrier {_cell(d['barrier'])}, freshness {_cell(d['freshness_seconds'])} s, "
            f"end to end {_cell(d['end_to_end_seconds'])} s, bottleneck {_cell(d['bottleneck_job'])}"
        )
        rows = [
            (s["job_id"], s["table"], s["status"], s["waiting_seconds"], s["processing_seconds"])
            for s in d["critical_path"]
        ]
        return head + "\n" + table_text(("job", "table", "status", "waiting s", "processing s"), rows)

    _show(data, as_json, render_all if table is None else render_one)


def job(
    job_id: Annotated[str, typer.Argument(help="the job id", show_default=False)],
    limit: Annotated[int, typer.Option(help="barriers to show, newest first")] = 20,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """A job's lineage, barrier in flight and barrier history (status, waiting and processing times)."""
    with _api(url, token) as api:
        info = api.call("GET", f"/jobs/{job_id}")
        history = api.call("GET", f"/jobs/{job_id}/barriers", params={"limit": limit})

    def render(d: dict[str, Any]) -> str:
        i = d["job"]
        head = [
            f"job {i['job_id']} ({'active' if i['is_active'] else 'unregistered'})",
            f"  reads:     {_cell(i['sources'])}",
            f"  writes:    {_cell(i['sinks'])}",
            f"  last barrier {_cell(i['last_barrier'])}, in flight {_cell(i['in_flight_barrier'])}",
        ]
        rows = [(r["barrier"], r["status"], r["started_at"], r["duration_seconds"], r["reason"]) for r in d["history"]]
        return "\n".join(head) + "\n" + table_text(("barrier", "status", "started", "duration s", "reason"), rows)

    _show({"job": info, "history": history["runs"]}, as_json, render)


def abort(
    job_id: Annotated[str, typer.Argument(help="the job id", show_default=False)],
    barrier: Annotated[int | None, typer.Argument(help="the barrier; default: the one in flight")] = None,
    reason: Annotated[str, typer.Option(help="recorded with the abort")] = "aborted by an admin (metaservice abort)",
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Abort a job's stuck barrier: it never completes in the job's sinks; downstream skips it."""
    with _api(url, token) as api:
        if barrier is None:
            barrier = api.call("GET", f"/jobs/{job_id}")["in_flight_barrier"]
            if barrier is None:
                _fail(f"job {job_id!r} has no barrier in flight; name one to abort")
        result = api.call("POST", f"/jobs/{job_id}/barriers/{barrier}/abort", json={"reason": reason})
    _show(result, as_json, lambda r: f"aborted barrier {r['barrier']} of job {r['job_id']}")


barrier_app = typer.Typer(help="Issue, list and inspect global barriers.", no_args_is_help=True)


@barrier_app.command("issue")
def barrier_issue(url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False) -> None:
    """Issue a global barrier now; it seals the newest reported snapshot of every root."""
    with _api(url, token) as api:
        issued = api.call("POST", "/barriers")

    def render(b: dict[str, Any]) -> str:
        sealed = table_text(("sealed root", "snapshot"), sorted(b["sealed"].items()))
        return f"issued barrier {b['barrier']} at {b['issued_at']}\n{sealed}"

    _show(issued, as_json, render)


@barrier_app.command("list")
def barrier_list(
    limit: Annotated[int, typer.Option(help="how many, newest first")] = 20,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Barriers, newest first."""
    with _api(url, token) as api:
        data = api.call("GET", "/barriers", params={"limit": limit})
    rows = [(b["barrier"], b["issued_at"], b["issued_by"]) for b in data["barriers"]]
    _show(data, as_json, lambda _d: table_text(("barrier", "issued at", "issued by"), rows))


@barrier_app.command("show")
def barrier_show(
    barrier: Annotated[int, typer.Argument(help="the barrier", show_default=False)],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """One barrier with the state of every table at it."""
    with _api(url, token) as api:
        data = api.call("GET", f"/barriers/{barrier}")

    def render(d: dict[str, Any]) -> str:
        rows = [(name, t["state"], t["snapshot_id"]) for name, t in sorted(d["tables"].items())]
        head = f"barrier {d['barrier']} issued at {d['issued_at']} by {_cell(d['issued_by'])}\n"
        return head + table_text(("table", "state", "snapshot"), rows)

    _show(data, as_json, render)


def retire(
    table: TableArgument,
    revive: Annotated[bool, typer.Option("--revive", help="undo a retirement instead")] = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Retire a table no job uses (out of lists, delays, lineage and reads), or revive it with --revive."""
    with _api(url, token) as api:
        result = api.call("POST", f"/tables/{_path(table)}/{'revive' if revive else 'retire'}")

    def render(r: dict[str, Any]) -> str:
        state = "retired" if r["retired"] else "revived"
        return f"{r['table']} {state}" if r["changed"] else f"{r['table']} was already {state}"

    _show(result, as_json, render)


rollback_app = typer.Typer(help="Plan, apply and cancel rollbacks of a table and its downstream.", no_args_is_help=True)


def _render_rollback(r: dict[str, Any]) -> str:
    tables = table_text(
        ("table", "restore to snapshot"), [(t, p["restore_snapshot_id"]) for t, p in sorted(r["tables"].items())]
    )
    jobs = table_text(
        ("job", "resumes after barrier"), [(j, p["resume_after_barrier"]) for j, p in sorted(r["jobs"].items())]
    )
    head = f"rollback {r['rollback_id']} of {r['table']} to barrier {r['barrier']}: {r['status']}"
    steps = ""
    if r["status"] == "planned":
        steps = (
            "\nnext: restore each table above in storage to its snapshot, then "
            f"`metaservice rollback apply {r['rollback_id']}` (or `rollback cancel`)"
        )
    return f"{head}\n{tables}\n{jobs}{steps}"


@rollback_app.command("plan")
def rollback_plan(
    table: TableArgument,
    barrier: Annotated[int, typer.Argument(help="the last good barrier", show_default=False)],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Plan a rollback of a table and everything downstream to a barrier: what to restore, who recomputes."""
    _path(table)
    with _api(url, token) as api:
        plan = api.call("POST", "/rollbacks", json={"table": table, "barrier": barrier})
    _show(plan, as_json, _render_rollback)


@rollback_app.command("show")
def rollback_show(
    rollback_id: Annotated[str, typer.Argument(help="the plan's id", show_default=False)],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """A rollback plan and its status."""
    with _api(url, token) as api:
        plan = api.call("GET", f"/rollbacks/{rollback_id}")
    _show(plan, as_json, _render_rollback)


@rollback_app.command("apply")
def rollback_apply(
    rollback_id: Annotated[str, typer.Argument(help="the plan's id", show_default=False)],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Storage was restored: forget the completions after the barrier and rewind the jobs."""
    with _api(url, token) as api:
        plan = api.call("POST", f"/rollbacks/{rollback_id}/complete", json={})
    _show(plan, as_json, _render_rollback)


@rollback_app.command("cancel")
def rollback_cancel(
    rollback_id: Annotated[str, typer.Argument(help="the plan's id", show_default=False)],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Drop a planned rollback."""
    with _api(url, token) as api:
        plan = api.call("POST", f"/rollbacks/{rollback_id}/cancel")
    _show(plan, as_json, _render_rollback)


def mount(app: typer.Typer) -> None:
    """Add the admin commands to the `metaservice` command line."""
    for command in (lineage, delays, job, abort, retire):
        app.command(rich_help_panel="Admin (over HTTP)")(command)
    app.add_typer(barrier_app, name="barrier", rich_help_panel="Admin (over HTTP)")
    app.add_typer(rollback_app, name="rollback", rich_help_panel="Admin (over HTTP)")
