"""Which table an OpenLineage dataset is: the rules of `METASERVICE_OPENLINEAGE_DATASETS`, or the default rule.

The default maps a dataset named `catalog.database.table` (each part a table name part) to that table, whatever
its namespace: the name OpenLineage's Spark, Trino and Hive integrations give catalog tables, and the name this
server emits. Configured rules replace the default (add it back as the last rule to keep it, see README).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from metaservice.schemas import NAME_PART
from metaservice.settings import OpenLineageDatasetRule

_TABLE = rf"{NAME_PART}\.{NAME_PART}\.{NAME_PART}"
DEFAULT_RULES = (OpenLineageDatasetRule(namespace="*", name=_TABLE, table="{0}"),)
_TABLE_NAME = re.compile(_TABLE)


@dataclass(frozen=True)
class Mapped:
    """What a dataset is: `table` (None: no table), and the index of the rule that decided (None: no rule matched)."""

    table: str | None
    rule: int | None


class InvalidMapping(ValueError):
    """A rule matched a dataset but its template gave no valid table name (a configuration mistake)."""


@dataclass(frozen=True)
class _Rule:
    namespace: str
    name: re.Pattern[str]
    table: str | None


class DatasetMapping:
    """The rules, compiled once per process (they are checked when the settings are read)."""

    def __init__(self, rules: Sequence[OpenLineageDatasetRule] | None) -> None:
        self.rules = tuple(rules) if rules is not None else DEFAULT_RULES
        self._compiled = [_Rule(r.namespace, re.compile(r.name), r.table) for r in self.rules]

    def table_for(self, namespace: str, name: str) -> Mapped:
        """The table the dataset `namespace`/`name` is. Raises `InvalidMapping` when the first matching rule's
        template makes something that is not `catalog.database.table`."""
        for index, rule in enumerate(self._compiled):
            if not fnmatchcase(namespace, rule.namespace):
                continue
            match = rule.name.fullmatch(name)
            if match is None:
                continue
            if rule.table is None:
                return Mapped(None, index)
            groups = [g or "" for g in match.groups()]
            named = {k: v or "" for k, v in match.groupdict().items()}
            table = rule.table.format(match.group(0), *groups, **named)
            if _TABLE_NAME.fullmatch(table) is None:
                raise InvalidMapping(
                    f"dataset mapping rule {index} turns dataset {name!r} (namespace {namespace!r}) into {table!r}, "
                    "which is not a table name (catalog.database.table)"
                )
            return Mapped(table, index)
        return Mapped(None, None)
