"""Write modes: how a job's output DataFrame lands in a sink, one mode per sink.

Every mode is exactly-once per barrier: the commit that applies it carries the `(job id, barrier)` tag, so a
retried barrier finds its own earlier commit instead of applying the mode twice. Every mode runs at Spark
scale: rows are read, joined and written by the executors; the driver only commits file lists.

Example:
    from spark_client.modes import Append, Merge, OverwritePartitions

    job.run_once(transform, mode={
        "lake.mart.readings": Append(),
        "lake.mart.sensor_state": Merge(keys=("sensor_id",), delete_column="deleted"),
        "lake.mart.daily": OverwritePartitions(columns=("day",)),
    })
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

SchemaPolicy = Literal["strict", "merge", "overwrite"]
"""How the data's schema may differ from the table's: `strict` (equal, by column name; the default), `merge`
(new columns are added to the table, existing ones keep their types) or `overwrite` (the data's schema replaces
the table's; only with a whole-table `Overwrite`)."""


@dataclass(frozen=True)
class Append:
    """Add the rows to the table.

    Example:
        Append(schema="merge")   # new columns in the data are added to the table
    """

    schema: SchemaPolicy = "strict"


@dataclass(frozen=True)
class Overwrite:
    """Replace the whole table with the rows (a whole-table write).

    Example:
        Overwrite(schema="overwrite")   # the table takes the data's schema too
    """

    schema: SchemaPolicy = "strict"


@dataclass(frozen=True)
class ReplaceWhere:
    """Replace the rows matching `predicate` (a Spark SQL boolean expression) with the rows; every row written
    must match the predicate (Delta's `replaceWhere`; ValueError otherwise). Rows where the predicate is NULL
    do not match.

    Example:
        ReplaceWhere("day >= '2026-11-01' AND day < '2026-12-01'")
    """

    predicate: str
    schema: SchemaPolicy = "strict"

    def __post_init__(self) -> None:
        if not isinstance(self.predicate, str) or not self.predicate.strip():
            raise ValueError("ReplaceWhere needs a Spark SQL predicate, e.g. ReplaceWhere(\"day = '2026-11-01'\")")


@dataclass(frozen=True)
class OverwritePartitions:
    """Replace exactly the partitions the rows touch: every row of the table whose values in `columns` occur in
    the data is replaced, the rest is kept (dynamic partition overwrite).

    Works on column values: the table need not be physically partitioned (the files holding rows of touched
    values are rewritten without them). NULL is a value like any other. Typical use: recompute the touched
    partitions from the whole input, e.g. `inputs[src].join(inputs.changes(src).select("day").distinct(), "day")`.

    Example:
        OverwritePartitions(columns=("day",))
    """

    columns: tuple[str, ...]
    schema: SchemaPolicy = "strict"

    def __post_init__(self) -> None:
        if isinstance(self.columns, str):
            raise TypeError(f"OverwritePartitions columns are a tuple of names, e.g. columns=({self.columns!r},)")
        if not self.columns:
            raise ValueError("OverwritePartitions needs at least one column")


@dataclass(frozen=True)
class Merge:
    """Upsert on `keys`: rows whose keys exist in the table replace those rows, the others are added; with
    `delete_column`, a row whose value there is true deletes the table's row with its keys instead (the column
    itself is not stored). Keys match with SQL equality, as in Delta MERGE: a row with a NULL key never matches
    and is added. The data may hold each key once (ValueError otherwise).

    Example:
        Merge(keys=("customer_id",), delete_column="_deleted")
    """

    keys: tuple[str, ...]
    delete_column: str | None = None
    schema: SchemaPolicy = "strict"

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("Merge needs at least one key column")
        if isinstance(self.keys, str):
            raise TypeError(f"Merge keys are a tuple of column names, e.g. keys=({self.keys!r},)")


WriteMode: TypeAlias = Append | Overwrite | ReplaceWhere | OverwritePartitions | Merge
ModeName = Literal["append", "overwrite"]
ModeSpec: TypeAlias = WriteMode | ModeName | Mapping[str, "WriteMode | ModeName"]
"""What `EtlJob.run_once(mode=...)` takes: one mode for every sink, or a mapping sink → mode."""

_SHORTHANDS: dict[str, WriteMode] = {"append": Append(), "overwrite": Overwrite()}
_SCHEMA_POLICIES = frozenset({"strict", "merge", "overwrite"})


def as_mode(mode: WriteMode | ModeName, *, sink: str | None = None) -> WriteMode:
    """The `WriteMode` for a mode or its shorthand ("append", "overwrite"), checked.

    Args:
        mode: a mode object or a shorthand string.
        sink: the sink it is for, named in errors.

    Returns:
        The mode object.

    Raises:
        ValueError: an unknown shorthand, an unknown schema policy, or `schema="overwrite"` with a mode that
            keeps rows of the table (only a whole-table `Overwrite` may replace the schema).

    Example:
        assert as_mode("append") == Append()
    """
    where = f" for sink {sink!r}" if sink else ""
    if isinstance(mode, str):
        if mode not in _SHORTHANDS:
            raise ValueError(
                f"unknown write mode {mode!r}{where}: use 'append', 'overwrite' or a mode object from "
                "spark_client.modes (Append, Overwrite, ReplaceWhere, OverwritePartitions, Merge)"
            )
        return _SHORTHANDS[mode]
    if not isinstance(mode, Append | Overwrite | ReplaceWhere | OverwritePartitions | Merge):
        raise TypeError(f"write mode{where} must be a spark_client.modes object or a shorthand, got {mode!r}")
    if mode.schema not in _SCHEMA_POLICIES:
        raise ValueError(f"schema policy{where} must be one of {sorted(_SCHEMA_POLICIES)}, got {mode.schema!r}")
    if mode.schema == "overwrite" and not isinstance(mode, Overwrite):
        raise ValueError(
            f"schema='overwrite'{where} replaces the table's schema and is only allowed with a whole-table "
            f"Overwrite; {type(mode).__name__} keeps rows of the table: use schema='merge' to add columns"
        )
    return mode


def resolve(spec: ModeSpec, sinks: Sequence[str], *, job_id: str) -> dict[str, WriteMode]:
    """One checked `WriteMode` per sink from a `ModeSpec`.

    Args:
        spec: one mode for every sink, or a mapping that names every sink exactly once.
        sinks: the job's sinks.
        job_id: the job, named in errors.

    Raises:
        ValueError: a mapping that misses a sink or names a table that is not a sink of the job.

    Example:
        modes = resolve({"lake.mart.a": Append()}, ["lake.mart.a"], job_id="enrich")
    """
    if isinstance(spec, Mapping):
        missing, unknown = sorted(set(sinks) - set(spec)), sorted(set(spec) - set(sinks))
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"no mode for sinks {missing}")
            if unknown:
                problems.append(f"modes for tables that are not sinks of the job: {unknown}")
            raise ValueError(f"job {job_id!r}: {'; '.join(problems)} (sinks: {sorted(sinks)})")
        return {sink: as_mode(spec[sink], sink=sink) for sink in sinks}
    one = as_mode(spec)
    return dict.fromkeys(sinks, one)


__all__ = [
    "Append",
    "Merge",
    "ModeName",
    "ModeSpec",
    "Overwrite",
    "OverwritePartitions",
    "ReplaceWhere",
    "SchemaPolicy",
    "WriteMode",
    "as_mode",
    "resolve",
]
