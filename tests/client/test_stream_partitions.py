"""How a streaming micro-batch spreads a barrier's files over read tasks (spark_client/streaming/source.py)."""

from __future__ import annotations

import pytest

from spark_client.streaming.source import spread


@pytest.mark.parametrize(
    ("files", "parallelism", "most", "sizes"),
    [
        (2, 2, 8, [1, 1]),  # a barrier of two big files: both cores read, not one
        (3, 2, 8, [2, 1]),
        (1, 4, 8, [1]),  # never an empty task
        (16, 2, 8, [8, 8]),
        (40, 2, 8, [8, 8, 8, 8, 8]),  # at most `most` files a task
        (5, 8, 8, [1, 1, 1, 1, 1]),
        (0, 2, 8, []),
    ],
)
def test_files_are_spread_over_the_cores_and_kept_in_order(
    files: int, parallelism: int, most: int, sizes: list[int]
) -> None:
    names = [f"part-{i:03d}.parquet" for i in range(files)]
    groups = spread(names, parallelism, most)
    assert [len(g) for g in groups] == sizes
    assert [name for group in groups for name in group] == names  # every file once, in order
