"""Retry policy: jittered exponential backoff, bounded in attempts and total time, honouring Retry-After."""

from __future__ import annotations

from dataclasses import dataclass

from tenacity import RetryCallState
from tenacity.wait import wait_random_exponential

from spark_client.errors import MetaServiceError


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried.

    Attributes:
        attempts: total tries per call, the first included.
        deadline: seconds after which no new try starts.
        initial_backoff: scale of the first wait (full jitter: uniform in [0, initial * 2**n], capped).
        max_backoff: cap of one wait, also for a server's Retry-After.

    Example:
        client = MetaServiceClient(url, retry=RetryPolicy(attempts=3, deadline=10))
    """

    attempts: int = 8
    deadline: float = 60.0
    initial_backoff: float = 0.1
    max_backoff: float = 5.0

    def wait(self, state: RetryCallState) -> float:
        """Seconds before the next try: the server's Retry-After when given, else jittered exponential."""
        outcome = state.outcome
        if outcome is not None and outcome.failed:
            exc = outcome.exception()
            if isinstance(exc, MetaServiceError):
                retry_after = exc.body.get("_retry_after")
                if isinstance(retry_after, int | float):
                    return float(min(max(retry_after, 0.0), self.max_backoff))
        return float(wait_random_exponential(multiplier=self.initial_backoff, max=self.max_backoff)(state))
