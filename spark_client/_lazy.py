"""Lazy exports for a package's `__init__` (PEP 562): a public name is imported from its module when first used,
so importing the package loads nothing else (`spark_client` without Spark; Spark's Python processes that read the
`metaservice` source without the job and the HTTP client)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str, modules: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__` for the public names of `modules` (name → defining module);
    `namespace` is the package's `globals()`, where a name imported once is kept."""

    def getattr_(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *modules})

    return getattr_, dir_
