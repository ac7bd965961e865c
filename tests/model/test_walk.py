"""The model-based test of issue 12: a seeded random walk over a changing lineage against the real server.

`make test` runs a short walk (WALK_STEPS); `make soak` runs 10,000 steps and prints the figures. The length
comes from METASERVICE_SOAK_STEPS and the seed from METASERVICE_MODEL_SEED (default: a fresh random seed,
printed). Both are read when the module is imported, before the suite's fixtures hide METASERVICE_* variables.
A failure prints the seed, the command that replays it and the walk's step log.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import httpx
import pytest

from tests.model.seal_marks import unmarked_tables_needing_a_seal
from tests.model.walk import Walk
from tests.model.wire import Wire

WALK_STEPS = 500  # about 45 s on a quiet 2-core machine
STEPS = int(os.environ.get("METASERVICE_SOAK_STEPS") or WALK_STEPS)
SEED = os.environ.get("METASERVICE_MODEL_SEED")
LOG_TAIL = 60


@pytest.mark.slow
@pytest.mark.timeout(600 + STEPS)
def test_a_random_walk_over_a_changing_lineage_reads_consistent_sets_and_leaves_no_job_stuck(
    api: httpx.Client, database_url: str, tmp_path: Path
) -> None:
    seed = int(SEED) if SEED else random.SystemRandom().randrange(2**32)
    wire = Wire(api)
    walk = Walk(wire, seed=seed)
    try:
        figures = walk.run(STEPS)
    except Exception as error:  # any failure, also an unexpected body: print the seed and the log
        log = tmp_path / f"walk-{seed}.log"
        log.write_text("\n".join(walk.log) + "\n")
        print("\n".join(walk.log))  # the whole step log, shown by pytest with the failure
        replay = f"METASERVICE_MODEL_SEED={seed} METASERVICE_SOAK_STEPS={STEPS} make soak"
        tail = "\n".join(walk.log[-LOG_TAIL:])
        raise AssertionError(
            f"{error}\n\nseed {seed} (replay: {replay}); step log in {log}; its last {LOG_TAIL} lines:\n{tail}"
        ) from error
    print("\n" + figures.summary(wire))
    assert figures.steps == STEPS and figures.drains >= STEPS // walk.drain_every
    assert unmarked_tables_needing_a_seal(database_url) == []  # reports, rollbacks and lineage changes marked them
    assert figures.consistent_sets > 0 and figures.strong_answers > 0, figures.summary(wire)
    assert figures.actions["run"] > 0 and sum(n for k, n in wire.outcomes.items() if "→ 2" in k) > 0
