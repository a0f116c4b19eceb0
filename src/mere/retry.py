"""The one retry policy: bounded attempts with jittered exponential backoff.

Commits use it to rebase after losing a race, the SQL catalog to wait out database locks, and storage to
retry transient object-store errors; only the bounds differ.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; before try ``n + 1`` wait ``min(max_delay, base_delay * 2**(n-1))``
    times a random factor in [0.5, 1.5) so that racing writers spread out."""

    attempts: int
    base_delay: float
    max_delay: float

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th failure (1-based)."""
        return float(min(self.max_delay, self.base_delay * (2 ** (attempt - 1))) * (0.5 + random.random()))

    def run(
        self,
        operation: Callable[[], T],
        retry_if: Callable[[BaseException], bool],
        on_retry: Callable[[BaseException, int, float], None] | None = None,
    ) -> T:
        """Run ``operation`` until it succeeds, an error ``retry_if`` rejects, or the attempts run out
        (the last error is raised as is)."""
        attempt = 1
        while True:
            try:
                return operation()
            except Exception as e:
                if attempt >= self.attempts or not retry_if(e):
                    raise
                delay = self.delay(attempt)
                if on_retry is not None:
                    on_retry(e, attempt, delay)
                time.sleep(delay)
                attempt += 1


COMMIT_RETRIES = RetryPolicy(attempts=20, base_delay=0.005, max_delay=0.5)
"""A commit that lost a race re-checks and rebases onto the new version; after the last, CommitConflict."""

CATALOG_LOCK_RETRIES = RetryPolicy(attempts=61, base_delay=0.005, max_delay=0.5)
"""A catalog transaction that hit a database lock or serialisation failure runs again."""

CATALOG_RECONNECT = RetryPolicy(attempts=12, base_delay=0.05, max_delay=2.0)
"""A catalog server that answered before and now refuses connections (a restart): about 15 s of retries."""
