"""Catalogs for the benchmarks: small pipelines through the API, big ones with set-based SQL into the schema.

Big catalogs are written with INSERT … SELECT over generate_series, straight into the tables the server uses,
keeping the invariants of `metaservice/db/models.py`: the barrier clock holds the newest barrier; each table
has at most one writer (sink edge); a table's snapshot ranges are contiguous, never overlap, start and end on
issued barriers; roots (no writer) keep their newest range open (`last_barrier` NULL, kind `sealed`);
intermediate ranges are `committed` by their writer and closed at the barrier the writer reached, which is its
job's `last_barrier`. Ids are given explicitly and the identity sequences moved past them, so rows the server
adds later do not collide.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

SECOND_US = 1_000_000


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    sources: tuple[str, ...]
    sinks: tuple[str, ...]


def register_rows(url: str, jobs: Sequence[JobSpec]) -> None:
    """The rows registration writes (tables, jobs, edges) for a fresh database, in three statements.

    Same end state as registering through the API, without its per-edge cycle checks (the specs are acyclic
    and name one writer per table by construction).
    """
    tables = sorted({t for job in jobs for t in (*job.sources, *job.sinks)})
    edges = [(job.job_id, t, "source") for job in jobs for t in job.sources]
    edges += [(job.job_id, t, "sink") for job in jobs for t in job.sinks]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tables (name, format) SELECT unnest(%s::text[]), 'delta'", (tables,))
        conn.execute("INSERT INTO jobs (name) SELECT unnest(%s::text[])", ([job.job_id for job in jobs],))
        conn.execute(
            """
            INSERT INTO lineage_edges (job_id, table_id, role, added_after)
            SELECT j.id, t.id, e.role, 0
              FROM unnest(%s::text[], %s::text[], %s::text[]) AS e(job, tab, role)
              JOIN jobs j ON j.name = e.job JOIN tables t ON t.name = e.tab
            """,
            ([e[0] for e in edges], [e[1] for e in edges], [e[2] for e in edges]),
        )
        # Statistics as a catalog that has been there a while has them: a generic plan made before autovacuum's
        # first ANALYZE of a freshly filled table takes it for empty and may keep a full scan in a loop.
        conn.execute("ANALYZE tables, jobs, lineage_edges")


def complete_once(url: str) -> int:
    """Every registered table completes one barrier at snapshot 0 and every job has one committed run there."""
    with psycopg.connect(url, autocommit=True) as conn:
        base = barriers(conn, count=1)
        conn.execute("UPDATE tables SET latest_snapshot_id = 0, latest_snapshot_at = now()")
        conn.execute(
            """
            INSERT INTO snapshot_ranges (table_id, first_barrier, last_barrier, snapshot_id, kind, job_id)
            SELECT t.id, %(b)s, CASE WHEN e.job_id IS NULL THEN NULL ELSE %(b)s END, 0,
                   CASE WHEN e.job_id IS NULL THEN 'sealed' ELSE 'committed' END, e.job_id
              FROM tables t LEFT JOIN lineage_edges e ON e.table_id = t.id AND e.role = 'sink'
            """,
            {"b": base},
        )
        conn.execute(
            """
            INSERT INTO job_runs (job_id, first_barrier, barrier, status, inputs_ready_at, started_at, finished_at)
            SELECT id, %(b)s, %(b)s, 'committed', now(), now(), now() FROM jobs
            """,
            {"b": base},
        )
        conn.execute("UPDATE jobs SET last_barrier = %(b)s", {"b": base})
        conn.execute("VACUUM ANALYZE")
    return base


def _base_barrier(count: int) -> int:
    """A first barrier `count` seconds in the past, so barriers issued later by the server stay increasing."""
    return (int(time.time()) - count - 3600) * SECOND_US


def barriers(conn: psycopg.Connection[object], *, count: int) -> int:
    """Issue `count` barriers one second apart, ending an hour ago; returns the first (others: + i·1 s)."""
    base = _base_barrier(count)
    conn.execute(
        """
        INSERT INTO barriers (barrier, issued_at, issued_by)
        SELECT b, to_timestamp(b / 1e6), 'seed'
          FROM generate_series(%(base)s::bigint, %(base)s::bigint + (%(n)s::bigint - 1) * 1000000, 1000000) b
        """,
        {"base": base, "n": count},
    )
    conn.execute("UPDATE barrier_clock SET last_barrier = (SELECT max(barrier) FROM barriers) WHERE id = 1")
    return base


def _move_sequences(conn: psycopg.Connection[object]) -> None:
    for table in ("tables", "jobs", "snapshot_ranges"):
        conn.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), coalesce((SELECT max(id) FROM {table}), 0) + 1,"
            " false)"
        )


def chains(url: str, *, chains: int, length: int, snapshots: int, barrier_count: int, prefix: str = "lake") -> None:
    """`chains` pipelines root → job → table → … (`length` tables each), every table with `snapshots` snapshots.

    Table (c, p) is `<prefix>.c<c:05>.t<p>` with id c·length + p + 1; job (c, p ≥ 1) writes it from (c, p - 1).
    Every table of chain c changes at the same barriers: every barrier_count / snapshots barriers, shifted by
    c so that chains do not change in lockstep. All jobs are caught up with the newest barrier.
    """
    step = barrier_count // snapshots
    assert step >= 1 and length >= 2
    with psycopg.connect(url, autocommit=True) as conn:
        base = barriers(conn, count=barrier_count)
        head = base + (barrier_count - 1) * SECOND_US
        params = {
            "chains": chains,
            "len": length,
            "snaps": snapshots,
            "step": step,
            "base": base,
            "head": head,
            "prefix": prefix,
        }
        conn.execute(
            """
            INSERT INTO tables (id, name, format, latest_snapshot_id, latest_snapshot_at)
            SELECT c * %(len)s + p + 1, format('%%s.c%%s.t%%s', %(prefix)s::text, lpad(c::text, 5, '0'), p), 'delta',
                   %(snaps)s - 1, now()
              FROM generate_series(0, %(chains)s - 1) c, generate_series(0, %(len)s - 1) p
            """,
            params,
        )
        conn.execute(
            """
            INSERT INTO jobs (id, name, last_barrier)
            SELECT c * (%(len)s - 1) + p, format('job-c%%s-p%%s', lpad(c::text, 5, '0'), p), %(head)s
              FROM generate_series(0, %(chains)s - 1) c, generate_series(1, %(len)s - 1) p
            """,
            params,
        )
        conn.execute(
            """
            INSERT INTO lineage_edges (job_id, table_id, role, added_after)
            SELECT c * (%(len)s - 1) + p, c * %(len)s + p + 1 - d, CASE d WHEN 1 THEN 'source' ELSE 'sink' END, 0
              FROM generate_series(0, %(chains)s - 1) c, generate_series(1, %(len)s - 1) p, generate_series(0, 1) d
            """,
            params,
        )
        # Ids are consistent by construction: skip the per-row foreign-key triggers (half the load time). The
        # exclusion constraint, unique indexes and CHECKs are still enforced.
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            """
            INSERT INTO snapshot_ranges (table_id, first_barrier, last_barrier, snapshot_id, kind, job_id)
            SELECT c * %(len)s + p + 1,
                   %(base)s + (CASE WHEN k = 0 THEN 0 ELSE k * %(step)s + c %% %(step)s END)::bigint * 1000000,
                   CASE WHEN k < %(snaps)s - 1
                        THEN %(base)s + ((k + 1) * %(step)s + c %% %(step)s - 1)::bigint * 1000000
                        WHEN p > 0 THEN %(head)s END,
                   k,
                   CASE WHEN p = 0 THEN 'sealed' ELSE 'committed' END,
                   CASE WHEN p = 0 THEN NULL ELSE c * (%(len)s - 1) + p END
              FROM generate_series(0, %(chains)s - 1) c, generate_series(0, %(len)s - 1) p,
                   generate_series(0, %(snaps)s - 1) k
            """,
            params,
        )
        conn.execute("RESET session_replication_role")
        _move_sequences(conn)
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")  # write the load out now, not while the benchmark measures


JOB_PREFIX, ROOT_PREFIX, SINK_PREFIX = "job", "bench.root.t", "bench.sink.t"


def one_root_per_job(jobs: int) -> list[JobSpec]:
    """`jobs` independent jobs, job<i> reading bench.root.t<i> and writing bench.sink.t<i> (wrk.lua's cycle)."""
    return [JobSpec(f"{JOB_PREFIX}{i}", (f"{ROOT_PREFIX}{i}",), (f"{SINK_PREFIX}{i}",)) for i in range(jobs)]


def idle_jobs(jobs: int) -> list[JobSpec]:
    """`jobs` more jobs, idle<i> reading bench.idle.r<i> and writing bench.idle.s<i>, that never call: a large
    catalog around the cycle's jobs."""
    return [JobSpec(f"idle{i}", (f"bench.idle.r{i}",), (f"bench.idle.s{i}",)) for i in range(jobs)]


def chain_tables(chain: int, length: int, prefix: str = "lake") -> list[str]:
    return [f"{prefix}.c{chain:05d}.t{p}" for p in range(length)]


def job_token(url: str, *, jobs: str) -> str:
    """A new job token acting for the jobs matching the glob `jobs` (its secret), as `metaservice token create`
    makes one."""
    import anyio

    from metaservice.db.database import Database
    from metaservice.services.tokens import create_token
    from metaservice.settings import Settings

    async def create() -> str:
        db = Database(Settings(database_url=url))
        await db.open()
        try:
            secret, _ = await create_token(db, name=f"bench-{jobs}", role="job", job_patterns=[jobs])
        finally:
            await db.close()
        return secret

    return anyio.run(create)
