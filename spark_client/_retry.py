"""RetryPolicy: jittered exponential backoff within a budget of total time (and optionally of attempts), honouring
Retry-After."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenacity import RetryCallState, Retrying
from tenacity.wait import wait_exponential, wait_random_exponential

from spark_client.errors import Unavailable


@dataclass(frozen=True)
class RetryPolicy:
    """How the client retries transient failures.

    The n-th wait is drawn uniformly from `[0, min(max_backoff, initial_backoff * 2**(n-1))]` ("full
    jitter"); without `jitter` it is that upper bound. When the server sends `Retry-After`, that many seconds
    are waited instead, capped at `max_backoff`. No attempt starts after `deadline` seconds: a wait that would
    end past it is not taken, and the last error is raised, saying how many attempts were made over how long.

    The budget is time, not a number of tries: by default a call keeps retrying for two minutes, long enough to
    ride out a rolling restart or a failover of the server (a request in flight when the budget ends may still
    take up to the client's `timeout`).

    Attributes:
        attempts: at most this many tries per call, the first included (1 disables retries); None (default):
            as many as fit in `deadline`.
        deadline: the retry budget: seconds, from the first try, within which every retry must start.
        initial_backoff: scale of the first wait, in seconds.
        max_backoff: cap of any single wait, the server's Retry-After included.
        jitter: draw waits at random below the exponential bound (spreads retrying clients apart).
        sleep: how to wait; tests pass a recorder instead of sleeping.
        clock: seconds on a monotonic clock, which measures the budget; tests pass one their `sleep` advances.

    Example:
        patient = RetryPolicy(deadline=600, max_backoff=30)   # ten minutes
        client = MetaServiceClient("http://127.0.0.1:8080", retry=patient)
    """

    attempts: int | None = None
    deadline: float = 120.0
    initial_backoff: float = 0.1
    max_backoff: float = 5.0
    jitter: bool = True
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.deadline <= 0:
            raise ValueError(f"deadline must be positive, got {self.deadline}")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ValueError(
                f"need 0 <= initial_backoff <= max_backoff, got {self.initial_backoff} and {self.max_backoff}"
            )

    def describe(self) -> str:
        """The budget in words, as the client's warnings and errors state it.

        Example:
            RetryPolicy().describe()   # "for up to 120s"
        """
        within = f"for up to {self.deadline:g}s"
        return within if self.attempts is None else f"up to {self.attempts} attempts {within}"

    def wait(self, state: RetryCallState) -> float:
        """Seconds to wait before the next try: the server's Retry-After when it sent one, else the backoff.

        Args:
            state: tenacity's state of the call being retried.

        Returns:
            The wait in seconds, never more than `max_backoff`.

        Example:
            Retrying(wait=policy.wait, ...)
        """
        outcome = state.outcome
        if outcome is not None and outcome.failed:
            exc = outcome.exception()
            if isinstance(exc, Unavailable) and exc.retry_after is not None:
                return min(max(exc.retry_after, 0.0), self.max_backoff)
        backoff = (wait_random_exponential if self.jitter else wait_exponential)(
            multiplier=self.initial_backoff, max=self.max_backoff
        )
        return float(backoff(state))

    def retrying(self, *, retry: Callable[[RetryCallState], bool], **hooks: Any) -> Retrying:
        """A tenacity `Retrying` that follows this policy.

        Args:
            retry: whether the outcome of an attempt is worth another one.
            **hooks: further `Retrying` arguments (`before_sleep`, `retry_error_callback`, ...).

        Returns:
            A fresh `Retrying`; iterate it to run the attempts.

        Example:
            for attempt in policy.retrying(retry=retry_if_exception_type(Unavailable)):
                with attempt:
                    send()
        """
        started = self.clock()

        def stop(state: RetryCallState) -> bool:
            """The attempts are used up, or the wait ahead would end past the budget (`deadline`)."""
            if self.attempts is not None and state.attempt_number >= self.attempts:
                return True
            return self.clock() - started + (state.upcoming_sleep or 0.0) >= self.deadline

        return Retrying(
            stop=stop,
            wait=self.wait,
            retry=retry,
            sleep=self.sleep,
            **hooks,
        )


__all__ = ["RetryPolicy"]
