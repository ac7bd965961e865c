"""SQL of the barrier protocol: gather a job's planning state in one statement, store a plan's outcome in one.

`gather` returns, for a set of jobs, everything `services/planner.py` reads: the jobs (version, in-flight, last
committed and last run, lineage change clock), their current edges, every table they touch (current writer,
newest range, newest output, first range, neighbouring barriers) and, for the tables they read, a window of ranges
from the job's newest settled barrier on. `apply` writes a plan's row changes only if every job it touches still
has the version the plan read (compare-and-set): concurrent steps of one job, settling by a downstream planner,
registrations and rollbacks all bump versions, so a plan made on a stale snapshot writes nothing and is made again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any, Literal

from psycopg.types.json import Jsonb

from metaservice.db.database import Connection
from metaservice.db.listener import NOTIFY_CALL
from metaservice.domain.world import JobView, Range, RunView, TableView, World, Writes
from metaservice.repositories.driver import fetch_one

WINDOW = 64  # ranges per input table per gather; a plan that needs more asks (`ranges_from`)

_RUN_JSON = (
    "jsonb_build_object('id', r.id, 'first', r.first_barrier, 'barrier', r.barrier, 'status', r.status, "
    "'inputs', r.inputs, 'outputs', r.outputs, 'reason', r.reason)"
)

_GATHER = f"""
    WITH {{jobs}},
    head AS (SELECT max(barrier) AS barrier FROM barriers),
    edges AS (
        SELECT e.job_id, e.table_id, e.role FROM lineage_edges e
         WHERE e.job_id IN (SELECT id FROM jobs_in) AND e.removed_at IS NULL
    ),
    job_rows AS (
        SELECT j.id, j.name, j.is_active AS active, j.last_barrier AS last, j.version,
               (SELECT max(greatest(x.added_after, coalesce(x.removed_after, x.added_after)))
                  FROM lineage_edges x WHERE x.job_id = j.id) AS lineage_after,
               (SELECT min(b.barrier) FROM barriers b WHERE b.barrier > j.last_barrier) AS after_last,
               (SELECT {_RUN_JSON} FROM job_runs r WHERE r.job_id = j.id AND r.status = 'in_flight') AS in_flight,
               (SELECT {_RUN_JSON} FROM job_runs r WHERE r.job_id = j.id AND r.status = 'committed'
                 ORDER BY r.barrier DESC LIMIT 1) AS last_committed,
               (SELECT {_RUN_JSON} FROM job_runs r WHERE r.job_id = j.id
                 ORDER BY r.first_barrier DESC LIMIT 1) AS last_run,
               (SELECT {_RUN_JSON} FROM job_runs r
                 WHERE r.job_id = j.id AND r.first_barrier <= j.at_barrier AND r.barrier >= j.at_barrier
                 ORDER BY r.first_barrier DESC LIMIT 1) AS run_at,
               coalesce((SELECT jsonb_agg(jsonb_build_array(e.table_id, e.role, t.name) ORDER BY t.name)
                           FROM edges e JOIN tables t ON t.id = e.table_id WHERE e.job_id = j.id), '[]') AS edges,
               j.stale, j.ord
          FROM jobs_in j
    ),
    table_rows AS (
        SELECT t.id, t.name, t.sealable, t.latest_snapshot_id AS latest,
               wr.job_id AS writer_id, wr.version AS writer_version,
               CASE WHEN n.id IS NULL THEN NULL ELSE jsonb_build_array(
                   n.id, n.first_barrier, n.last_barrier, n.snapshot_id, n.kind, n.job_id) END AS newest,
               CASE WHEN o.snapshot_id IS NULL THEN NULL ELSE jsonb_build_array(o.snapshot_id, o.job_id) END AS output,
               f.first_barrier, c.first_barrier AS first_complete,
               (SELECT max(b.barrier) FROM barriers b WHERE b.barrier < f.first_barrier) AS before_first,
               (SELECT min(b.barrier) FROM barriers b WHERE b.barrier > n.last_barrier) AS after_frontier
          FROM (SELECT DISTINCT table_id FROM edges) d
          JOIN tables t ON t.id = d.table_id
          LEFT JOIN LATERAL (SELECT w.job_id, wj.version FROM lineage_edges w JOIN jobs wj ON wj.id = w.job_id
                              WHERE w.table_id = t.id AND w.role = 'sink' AND w.removed_at IS NULL) wr ON true
          LEFT JOIN LATERAL (SELECT * FROM snapshot_ranges r WHERE r.table_id = t.id
                              ORDER BY r.first_barrier DESC LIMIT 1) n ON true
          LEFT JOIN LATERAL (SELECT r.snapshot_id, r.job_id FROM snapshot_ranges r
                              WHERE r.table_id = t.id AND r.snapshot_id IS NOT NULL
                              ORDER BY r.first_barrier DESC LIMIT 1) o ON true
          LEFT JOIN LATERAL (SELECT r.first_barrier FROM snapshot_ranges r WHERE r.table_id = t.id
                              ORDER BY r.first_barrier LIMIT 1) f ON true
          LEFT JOIN LATERAL (SELECT r.first_barrier FROM snapshot_ranges r
                              WHERE r.table_id = t.id AND r.snapshot_id IS NOT NULL
                              ORDER BY r.first_barrier LIMIT 1) c ON true
    ),
    windows AS (
        SELECT d.table_id, d.from_barrier,
               (SELECT jsonb_agg(jsonb_build_array(w.id, w.first_barrier, w.last_barrier, w.snapshot_id, w.kind,
                                                   w.job_id) ORDER BY w.first_barrier)
                  FROM (SELECT r.* FROM snapshot_ranges r
                         WHERE r.table_id = d.table_id
                           AND (r.last_barrier IS NULL OR r.last_barrier >= d.from_barrier)
                         ORDER BY r.first_barrier LIMIT {WINDOW}) w) AS rows
          FROM (SELECT DISTINCT e.table_id, j.last_barrier AS from_barrier
                  FROM edges e JOIN jobs_in j ON j.id = e.job_id
                 WHERE e.role = 'source' AND j.last_barrier IS NOT NULL AND j.windows) d
        UNION ALL
        SELECT d.table_id, NULL,
               (SELECT jsonb_agg(jsonb_build_array(w.id, w.first_barrier, w.last_barrier, w.snapshot_id, w.kind,
                                                   w.job_id) ORDER BY w.first_barrier)
                  FROM (SELECT r.* FROM snapshot_ranges r WHERE r.table_id = d.table_id
                         ORDER BY r.first_barrier DESC LIMIT {WINDOW}) w) AS rows
          FROM (SELECT DISTINCT e.table_id FROM edges e JOIN jobs_in j ON j.id = e.job_id
                 WHERE e.role = 'source' AND j.last_barrier IS NULL AND j.windows) d
    )
    SELECT (SELECT barrier FROM head),
           (SELECT max(b.barrier) FROM barriers b WHERE b.barrier < (SELECT barrier FROM head)),
           (SELECT coalesce(jsonb_agg(to_jsonb(j)), '[]') FROM job_rows j),
           (SELECT coalesce(jsonb_agg(to_jsonb(t)), '[]') FROM table_rows t),
           (SELECT coalesce(jsonb_agg(jsonb_build_array(w.table_id, w.from_barrier, w.rows)), '[]') FROM windows w)
"""

# Jobs asked for by name, each with its own `barrier` (its run covering that barrier is answered too) and
# `windows` flag, numbered in the order asked (`ord`): one statement serves a batch of steps (db/coalescer.py).
_BY_NAMES = _GATHER.format(
    jobs="jobs_in AS (SELECT j.id, j.name, j.is_active, j.last_barrier, j.version, "
    "j.last_seen_at < now() - interval '10 seconds' AS stale, q.barrier AS at_barrier, q.windows, q.ord "
    "FROM unnest(CAST(%(names)s AS text[]), CAST(%(barriers)s AS bigint[]), CAST(%(windows)s AS boolean[])) "
    "WITH ORDINALITY AS q(name, barrier, windows, ord) JOIN jobs j ON j.name = q.name)"
)
_BY_IDS = _GATHER.format(
    jobs="jobs_in AS (SELECT id, name, is_active, last_barrier, version, false AS stale, NULL::bigint AS at_barrier, "
    "true AS windows, 0::bigint AS ord FROM jobs WHERE id = ANY(CAST(%(ids)s AS bigint[])))"
)

_RANGES_FROM = f"""
    SELECT coalesce(jsonb_agg(jsonb_build_array(w.id, w.first_barrier, w.last_barrier, w.snapshot_id, w.kind,
                                                w.job_id) ORDER BY w.first_barrier), '[]')
      FROM (SELECT r.* FROM snapshot_ranges r
             WHERE r.table_id = %(table_id)s AND (r.last_barrier IS NULL OR r.last_barrier >= %(barrier)s)
             ORDER BY r.first_barrier LIMIT {WINDOW}) w
"""
_AFTER = "SELECT min(barrier) FROM barriers WHERE barrier > %(barrier)s"


@dataclass
class Gathered:
    world: World
    job_id: int | None  # the job asked for by name (None: not registered)
    run_at: RunView | None  # with `barrier`: the job's run covering it
    stale: bool  # the job was last seen over 10 s ago


def _range(table_id: int, row: Sequence[Any]) -> Range:
    return Range(row[0], table_id, row[1], row[2], row[3], row[4], row[5])


def _run(data: Mapping[str, Any] | None) -> RunView | None:
    if data is None:
        return None
    return RunView(
        data["id"], data["first"], data["barrier"], data["status"], data["inputs"], data["outputs"], data["reason"]
    )


def _merge(world: World, head: Any, before_head: Any, jobs: Any, tables: Any, windows: Any) -> None:
    """Add what a fetch read to `world`. The world keeps the head of its first fetch: a plan is decided as of that
    barrier (docs/design.md, "One head per plan"), and later fetches only add facts about barriers up to it."""
    if world.head is None and not world.jobs and not world.tables:
        world.head, world.before_head = head, before_head
    head = world.head
    for t in tables:
        if t["id"] in world.tables:
            continue
        newest = _range(t["id"], t["newest"]) if t["newest"] is not None else None
        output = t["output"]
        view = TableView(
            id=t["id"],
            name=t["name"],
            writer_id=t["writer_id"],
            newest=newest,
            last_output=(output[0], output[1]) if output is not None else None,
            first_barrier=t["first_barrier"],
            first_complete=t["first_complete"],
            before_first=t["before_first"],
            after_frontier=t["after_frontier"],
            writer_version=t["writer_version"],
            unsealed=t["writer_id"] is None
            and t["sealable"]
            and t["latest"] is not None
            and (newest is None or newest.last is not None or newest.snapshot != t["latest"]),
        )
        if newest is not None:
            view.ranges[newest.first] = newest
        world.tables[view.id] = view
    for table_id, from_barrier, rows in windows:
        ranges = [_range(table_id, r) for r in rows or []]
        view = world.tables[table_id]
        complete = len(ranges) < WINDOW
        if from_barrier is None:  # the newest ranges, descending before sorting: they reach the newest
            covers_from = ranges[0].first if ranges else 0
            view.learn(ranges, covers_from=covers_from, complete=True, head=head)
        else:
            view.learn(ranges, covers_from=from_barrier, complete=complete, head=head)
    for j in jobs:
        if j["id"] in world.jobs:
            continue
        edges = j["edges"]
        world.jobs[j["id"]] = JobView(
            id=j["id"],
            name=j["name"],
            active=j["active"],
            last=j["last"],
            version=_earliest_version(world, j["id"], j["version"]),
            sources=[e[0] for e in edges if e[1] == "source"],
            sinks=[e[0] for e in edges if e[1] == "sink"],
            in_flight=_run(j["in_flight"]),
            last_committed=_run(j["last_committed"]),
            last_run=_run(j["last_run"]),
            lineage_after=j["lineage_after"],
            after_last=j["after_last"],
        )


def _earliest_version(world: World, job_id: int, version: int) -> int:
    """The job's version as of the oldest state the world holds of the tables it writes.

    A plan may fetch a job after the tables it writes (an upstream writer it settles: `gather_jobs`), and `_merge`
    keeps the views it already has. Had the job changed in between (committed a barrier, say), the plan would see
    its tables without that change yet expect the job's newer version, so the compare-and-set would let it write
    over the change (a duplicate range: an error, not a retry). Expecting the version seen with the tables makes
    such a plan write nothing and be made again on a fresh gather. Versions only grow, so the oldest is the least.
    """
    seen = [t.writer_version for t in world.tables.values() if t.writer_id == job_id and t.writer_version is not None]
    return min([version, *seen])


@dataclass(frozen=True)
class GatherRequest:
    """One step's gather: the job called `name`, its run covering `barrier` (when given), and its inputs' windows
    of ranges (left out by commit and abort, which do not walk)."""

    name: str
    barrier: int | None = None
    windows: bool = True


async def gather(conn: Connection, *, name: str, barrier: int | None = None, windows: bool = True) -> Gathered:
    """The planning state of the job called `name` and (with `barrier`) its run covering that barrier. Without
    `windows` the input ranges are left out (commit and abort do not walk)."""
    [gathered] = await gather_many(conn, [GatherRequest(name, barrier, windows)])
    return gathered


async def gather_many(conn: Connection, requests: Sequence[GatherRequest]) -> list[Gathered]:
    """`gather` for several steps in one statement (one snapshot): each answer holds its own job and the tables it
    touches, exactly as a gather of that job alone would (plans change their world, so none is shared)."""
    params = {
        "names": [r.name for r in requests],
        "barriers": [r.barrier for r in requests],
        "windows": [r.windows for r in requests],
    }
    row = await fetch_one(conn, _BY_NAMES, params, prepare=True)
    assert row is not None
    head, before_head, jobs, tables, windows = row[:5]
    answers = [Gathered(World(head, before_head, {}, {}), None, None, False) for _ in requests]
    by_id = {t["id"]: t for t in tables}
    window_of = {(w[0], w[1]): w for w in windows}  # (table, from barrier): each is fetched once per statement
    for j in jobs:
        request = requests[j["ord"] - 1]
        sources = [e[0] for e in j["edges"] if e[1] == "source"]
        own_windows = [window_of[t, j["last"]] for t in sources] if request.windows else []
        answer = answers[j["ord"] - 1]
        _merge(answer.world, head, before_head, [j], [by_id[e[0]] for e in j["edges"]], own_windows)
        answer.job_id, answer.run_at, answer.stale = j["id"], _run(j["run_at"]), bool(j["stale"])
    return answers


async def gather_jobs(conn: Connection, world: World, *, job_ids: Sequence[int]) -> None:
    """Add the planning state of `job_ids` (upstream writers a plan settles) to `world`."""
    row = await fetch_one(conn, _BY_IDS, {"ids": list(job_ids)}, prepare=True)
    assert row is not None
    _merge(world, *row[:5])


async def ranges_from(conn: Connection, world: World, *, table_id: int, barrier: int) -> None:
    """Add the ranges of `table_id` from `barrier` on to `world` (a plan walked past its window)."""
    row = await fetch_one(conn, _RANGES_FROM, {"table_id": table_id, "barrier": barrier})
    ranges = [_range(table_id, r) for r in (row[0] if row else [])]
    world.tables[table_id].learn(ranges, covers_from=barrier, complete=len(ranges) < WINDOW, head=world.head)


async def barrier_after(conn: Connection, world: World, *, barrier: int) -> None:
    """Add the first barrier issued after `barrier` to `world`."""
    row = await fetch_one(conn, _AFTER, {"barrier": barrier})
    world.after[barrier] = row[0] if row else None


# The write is composed of the parts its plans need (a `next` handing out a barrier inserts a run; a commit ends
# ranges, adds ranges, finishes the run and raises the sinks' newest snapshot): every part of the statement locks
# its table and indexes and starts its executor node on each run, even with nothing to write, so a statement
# with only the parts in use costs PostgreSQL less (docs/design.md, Performance). The jobs come as typed arrays:
# a generic plan expects 100 rows of a `jsonb_to_recordset` and hashed a scan of every job to join them. At most
# 2^8 texts (six optional parts, with or without the notification, waiting for locked jobs or skipping them),
# each prepared once per connection.
#
# One statement stores several plans (a batch of steps, db/coalescer.py), each under its own compare-and-set:
# every row carries the index of its plan, and a plan whose jobs changed (or, with SKIP LOCKED, are locked by
# another transaction) writes nothing while the others are stored. Plans of one statement touch disjoint jobs.
_HEAD = """
    WITH expect AS (
        SELECT * FROM unnest(CAST(%(job_ids)s AS bigint[]), CAST(%(job_versions)s AS bigint[]),
                             CAST(%(job_lasts)s AS bigint[]), CAST(%(job_plans)s AS int[]))
               AS x(id, version, last_barrier, plan)
    ),
    locked AS (
        SELECT j.id, j.version FROM jobs j WHERE j.id = ANY(CAST(%(job_ids)s AS bigint[]))
         ORDER BY j.id FOR UPDATE{skip_locked}
    ),
    refused AS (
        SELECT coalesce(array_agg(DISTINCT x.plan), '{{}}') AS plans,
               coalesce(array_agg(DISTINCT x.plan) FILTER (WHERE l.id IS NULL), '{{}}') AS unlocked
          FROM expect x LEFT JOIN locked l USING (id)
         WHERE l.id IS NULL OR l.version <> x.version
    ),
    bumped AS (
        UPDATE jobs j SET version = j.version + 1,
                          last_barrier = coalesce(x.last_barrier, j.last_barrier),
                          last_seen_at = now()
          FROM expect x
         WHERE j.id = x.id AND x.plan <> ALL(CAST((SELECT plans FROM refused) AS int[]))
    )"""
_PARTS = {
    "range_ends": """
    range_ends AS (
        UPDATE snapshot_ranges r SET last_barrier = x.last, updated_at = now()
          FROM unnest(CAST(%(range_end_ids)s AS bigint[]), CAST(%(range_end_lasts)s AS bigint[]),
                      CAST(%(range_end_plans)s AS int[])) AS x(id, last, plan)
         WHERE r.id = x.id AND x.plan <> ALL(CAST((SELECT plans FROM refused) AS int[]))
    )""",
    "new_ranges": """
    new_ranges AS (
        INSERT INTO snapshot_ranges (table_id, first_barrier, last_barrier, snapshot_id, kind, job_id)
        SELECT x.table_id, x.first, x.last, x.snapshot, x.kind, x.job_id
          FROM jsonb_to_recordset(%(new_ranges)s)
               AS x(table_id bigint, first bigint, last bigint, snapshot bigint, kind text, job_id bigint, plan int)
         WHERE x.plan <> ALL(CAST((SELECT plans FROM refused) AS int[]))
        RETURNING id, table_id, first_barrier
    )""",
    "run_ends": """
    run_ends AS (
        UPDATE job_runs r SET barrier = x.barrier, finished_at = clock_timestamp()
          FROM unnest(CAST(%(run_end_ids)s AS bigint[]), CAST(%(run_end_barriers)s AS bigint[]),
                      CAST(%(run_end_plans)s AS int[])) AS x(id, barrier, plan)
         WHERE r.id = x.id AND x.plan <> ALL(CAST((SELECT plans FROM refused) AS int[]))
    )""",
    "finished": """
    finished AS (
        UPDATE job_runs r SET status = x.status, finished_at = clock_timestamp(),
                              outputs = coalesce(x.outputs, r.outputs), reason = coalesce(x.reason, r.reason)
          FROM unnest(CAST(%(finished_ids)s AS bigint[]), CAST(%(finished_statuses)s AS text[]),
                      CAST(%(finished_outputs)s AS jsonb[]), CAST(%(finished_reasons)s AS text[]),
                      CAST(%(finished_plans)s AS int[]))
               AS x(id, status, outputs, reason, plan)
         WHERE r.id = x.id AND x.plan <> ALL(CAST((SELECT plans FROM refused) AS int[]))
    )""",
    "new_runs": """
    new_runs AS (
        INSERT INTO job_runs (job_id, first_barrier, barrier, status, inputs, outputs, reason, inputs_ready_at,
                              started_at, finished_at)
        SELECT x.job_id, x.first, x.barrier, x.status, x.inputs, '{}'::jsonb, x.reason,
               CASE WHEN x.status = 'in_flight' THEN greatest(
                   (SELECT b.issued_at FROM barriers b WHERE b.barrier = x.barrier),
                   (SELECT max(CASE WHEN s.first_barrier = x.barrier THEN s.created_at ELSE s.updated_at END)
                      FROM snapshot_ranges s WHERE s.id = ANY(x.ready_ranges)),
                   CASE WHEN x.ready_now THEN clock_timestamp() END) END,
               clock_timestamp(), CASE WHEN x.status <> 'in_flight' THEN clock_timestamp() END
          FROM jsonb_to_recordset(%(new_runs)s)
               AS x(job_id bigint, first bigint, barrier bigint, status text, inputs jsonb, reason text,
                    ready_ranges bigint[], ready_now boolean, plan int)
         WHERE x.plan <> ALL(CAST((SELECT plans FROM refused) AS int[]))
        RETURNING id, job_id, first_barrier
    )""",
    # The sinks' rows are locked by id first, the order every transaction locks tables rows in (docs/design.md,
    # "Lock order"): updated in the plans' order, two sinks deadlocked with an allocation locking them by id.
    "latest": """
    latest AS (
        UPDATE tables t SET latest_snapshot_id = greatest(coalesce(t.latest_snapshot_id, -1), x.snapshot_id),
                            latest_snapshot_at = now()
          FROM unnest(CAST(%(latest_tables)s AS bigint[]), CAST(%(latest_snapshots)s AS bigint[]),
                      CAST(%(latest_plans)s AS int[])) AS x(table_id, snapshot_id, plan)
         WHERE t.id = x.table_id AND x.plan <> ALL(CAST((SELECT plans FROM refused) AS int[]))
           AND t.id IN (SELECT l.id FROM tables l
                         WHERE l.id = ANY(ARRAY(
                                   SELECT y.table_id
                                     FROM unnest(CAST(%(latest_tables)s AS bigint[]), CAST(%(latest_plans)s AS int[]))
                                          AS y(table_id, plan)
                                    WHERE y.plan <> ALL(CAST((SELECT plans FROM refused) AS int[]))))
                         ORDER BY l.id FOR NO KEY UPDATE)
    )""",
}
# The tail answers which plans were refused (and which of those for a job another transaction held locked),
# whether it notified, and the ids of the rows it inserted, in the order of their unique keys ((table, first
# barrier) for ranges, (job, first barrier) for runs).
_NOTIFIED = f"(SELECT count(*) FROM (SELECT {NOTIFY_CALL} WHERE cardinality(plans) < %(plan_count)s) n) > 0"
_RANGE_IDS = "ARRAY(SELECT id FROM new_ranges ORDER BY table_id, first_barrier)"
_RUN_IDS = "ARRAY(SELECT id FROM new_runs ORDER BY job_id, first_barrier)"

Stored = Literal["stored", "changed", "locked"]


@cache
def _apply_statement(parts: tuple[str, ...], notifying: bool, skip_locked: bool) -> str:
    """The write with only `parts` (names of `_PARTS`, in its order) after the version check."""
    answers = [
        "plans",
        "unlocked",
        _NOTIFIED if notifying else "false",
        _RANGE_IDS if "new_ranges" in parts else "NULL::bigint[]",
        _RUN_IDS if "new_runs" in parts else "NULL::bigint[]",
    ]
    head = _HEAD.format(skip_locked=" SKIP LOCKED" if skip_locked else "")
    return ",".join([head, *(_PARTS[p] for p in parts)]) + f"\n    SELECT {', '.join(answers)} FROM refused"


def may_complete_versions(writes: Writes) -> bool:
    """A new or cut snapshot range may complete a consistent version: freshness-bounded reads must hear of it."""
    return bool(writes.new_ranges or writes.range_ends)


async def apply(conn: Connection, writes: Writes, *, notify: bool = True) -> bool:
    """Store a plan's row changes if every job it touches still has the version the plan read; False when one
    changed meanwhile (nothing was written: plan again). With `notify`, the statement itself wakes
    freshness-bounded reads on commit (for a caller inside a larger transaction); the autocommit hot path passes
    False and tells `ChangeNotifier` once the statement returned (see db/listener.py)."""
    [stored] = await apply_many(conn, [writes], notify=notify)
    return stored == "stored"


async def apply_many(
    conn: Connection, plans: Sequence[Writes], *, notify: bool = False, skip_locked: bool = False
) -> list[Stored]:
    """Store several plans in one statement, each only if every job it touches still has the version it read.

    Per plan: "stored"; "changed" (a job changed meanwhile: nothing of it was written, plan again); or, with
    `skip_locked`, "locked" (another transaction holds one of its jobs: nothing written; store it alone, which
    waits for the lock). So one contended job never makes a batch wait. The plans must touch disjoint jobs.
    """
    columns: dict[str, list[Any]] = {"job_ids": [], "job_versions": [], "job_lasts": [], "job_plans": []}

    def add(**values: Any) -> None:
        for name, value in values.items():
            columns.setdefault(name, []).append(value)

    new_ranges: list[dict[str, Any]] = []
    new_runs: list[dict[str, Any]] = []
    for i, w in enumerate(plans):
        for j in sorted(w.expect):  # locked in id order
            add(job_ids=j, job_versions=w.expect[j], job_lasts=w.job_lasts.get(j), job_plans=i)
        for range_id, last in w.range_ends.items():
            add(range_end_ids=range_id, range_end_lasts=last, range_end_plans=i)
        new_ranges += [{**asdict(r), "plan": i} for r in w.new_ranges]  # the record names Range's fields
        for run_id, barrier in w.run_ends.items():
            add(run_end_ids=run_id, run_end_barriers=barrier, run_end_plans=i)
        for run_id, status, outputs, reason in w.finished_runs:
            add(finished_ids=run_id, finished_statuses=status, finished_reasons=reason, finished_plans=i)
            add(finished_outputs=None if outputs is None else Jsonb(outputs))
        new_runs += [{**asdict(r), "plan": i} for r in w.new_runs]  # the record names NewRun's fields
        for table_id, snapshot in w.latest.items():
            add(latest_tables=table_id, latest_snapshots=snapshot, latest_plans=i)
    if len(set(columns["job_ids"])) != len(columns["job_ids"]):
        raise ValueError("plans stored in one statement must touch disjoint jobs")
    params: dict[str, Any] = {"plan_count": len(plans), **columns}
    if new_ranges:
        params["new_ranges"] = Jsonb(new_ranges)
    if new_runs:
        params["new_runs"] = Jsonb(new_runs)
    parts = tuple(part for part, key in _PART_KEYS.items() if key in params)
    notifying = notify and any(may_complete_versions(w) for w in plans)
    row = await fetch_one(conn, _apply_statement(parts, notifying, skip_locked), params, prepare=True)
    assert row is not None
    refused, unlocked = set(row[0]), set(row[1])
    answers: list[Stored] = [
        "stored" if i not in refused else "locked" if skip_locked and i in unlocked else "changed"
        for i in range(len(plans))
    ]
    _name_inserted([w for w, a in zip(plans, answers, strict=True) if a == "stored"], row[3] or [], row[4] or [])
    return answers


async def apply_batch(conn: Connection, plans: Sequence[Writes]) -> list[Stored]:
    """`apply_many` for the coalesced writes of the hot path: plans whose jobs are locked are left to their step."""
    return await apply_many(conn, plans, skip_locked=True)


# The parameter whose presence tells that a plan of the statement needs the part (in the statement's order).
_PART_KEYS = {
    "range_ends": "range_end_ids",
    "new_ranges": "new_ranges",
    "run_ends": "run_end_ids",
    "finished": "finished_ids",
    "new_runs": "new_runs",
    "latest": "latest_tables",
}


def _name_inserted(plans: Sequence[Writes], range_ids: Sequence[int], run_ids: Sequence[int]) -> None:
    """Give the stored plans' new ranges and runs the ids the database gave their rows. The ranges are the ones
    each plan's world holds (`TableView.newest` and `ranges`), so that world now names its rows as a fresh gather
    would (services/commit_hints.py plans a commit from it)."""
    ranges = sorted((r for w in plans for r in w.new_ranges), key=lambda r: (r.table_id, r.first))
    runs = sorted((r for w in plans for r in w.new_runs), key=lambda r: (r.job_id, r.first))
    for r, range_id in zip(ranges, range_ids, strict=True):
        r.id = range_id
    for run, run_id in zip(runs, run_ids, strict=True):
        run.id = run_id


_TOUCH = "UPDATE jobs SET last_seen_at = now() WHERE id = %(id)s"


async def touch(conn: Connection, *, job_id: int) -> None:
    """Mark the job as seen now (a step that wrote nothing; steps that write do it as they write)."""
    await conn.execute(_TOUCH, {"id": job_id})
