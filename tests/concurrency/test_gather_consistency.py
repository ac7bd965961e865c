"""A plan assembled from several gathers must not expect a job's version newer than the state it holds of the
job's tables (repositories/protocol.py, `_earliest_version`).

Found by the fault history (tests/faults/test_history.py) as a 500: `top`'s `next` gathered the table `ab`,
`join` (its writer) committed a barrier, and `top`'s plan then fetched `join` to settle it. It saw `ab` without
that commit but expected `join`'s new version, so the compare-and-set let it insert a range that already existed
(a unique violation). Here the same interleaving is made exact: gather, change the writer, fetch the writer.
"""

from __future__ import annotations

import anyio
import httpx
import psycopg

from metaservice.domain.world import Writes
from metaservice.repositories import protocol as protocol_rows


def _process_and_commit(api: httpx.Client, job: str, roots: dict[str, int], sink: str, snapshot: int) -> int:
    decision = api.post(f"/jobs/{job}/barriers/next", json={"root_snapshots": roots})
    assert decision.status_code == 200 and decision.json()["action"] == "process", decision.text
    barrier = int(decision.json()["barrier"])
    commit = api.post(f"/jobs/{job}/barriers/{barrier}/commit", json={"snapshots": {sink: snapshot}})
    assert commit.status_code == 200, commit.text
    return barrier


def test_a_writer_fetched_after_its_tables_is_expected_at_the_version_seen_with_them(
    api: httpx.Client, database_url: str
) -> None:
    for path in ("/register/source/up/lake/raw/r", "/register/sink/up/lake/mid/m"):
        assert api.post(path).status_code == 201
    for path in ("/register/source/down/lake/mid/m", "/register/sink/down/lake/mart/d"):
        assert api.post(path).status_code == 201
    _process_and_commit(api, "up", {"lake.raw.r": 1}, "lake.mid.m", 10)

    async def interleaving() -> tuple[int, int, int, bool]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            g = await protocol_rows.gather(conn, name="down")  # holds lake.mid.m as of now
            m = next(t for t in g.world.tables.values() if t.name == "lake.mid.m")
            assert m.writer_id is not None and m.writer_version is not None
            up, seen = m.writer_id, m.writer_version
            _process_and_commit(api, "up", {"lake.raw.r": 2}, "lake.mid.m", 20)  # up changes meanwhile
            await protocol_rows.gather_jobs(conn, g.world, job_ids=[up])  # the plan fetches up to settle it
            row = await (await conn.execute("SELECT version FROM jobs WHERE id = %s", [up])).fetchone()
            assert row is not None
            # A plan touching up now writes nothing (it is made again on a fresh gather), instead of writing
            # over up's commit.
            stored = await protocol_rows.apply(conn, Writes(expect={up: g.world.jobs[up].version}))
            return seen, g.world.jobs[up].version, int(row[0]), stored

    seen, expected, now, stored = anyio.run(interleaving)
    assert now > seen, "up's commit bumps its version"
    assert expected == seen, "the plan expects the version it saw with up's tables, not the newer one"
    assert stored is False
