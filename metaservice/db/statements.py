"""Counts the SQL statements each request runs, for `/metrics` (statements per route) and the benchmarks.

A request's counter lives in a context variable set by the request middleware; the repository helpers and the
transaction helper add one per statement they send, and the barrier allocator adds each caller's share of a
coalesced call (one statement serves a whole batch). Nothing is counted outside requests.
"""

from __future__ import annotations

from contextvars import ContextVar, Token


class Tally:
    """The statements one request ran (a float: a coalesced statement counts a fraction per caller)."""

    __slots__ = ("statements",)

    def __init__(self) -> None:
        self.statements = 0.0


_current: ContextVar[Tally | None] = ContextVar("metaservice_statements", default=None)


def start() -> tuple[Tally, Token[Tally | None]]:
    tally = Tally()
    return tally, _current.set(tally)


def stop(token: Token[Tally | None]) -> None:
    _current.reset(token)


def current() -> Tally | None:
    return _current.get()


def count(statements: float = 1.0) -> None:
    tally = _current.get()
    if tally is not None:
        tally.statements += statements
