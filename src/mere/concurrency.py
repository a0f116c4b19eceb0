"""Shared, fork-aware thread pools: starting threads per call costs more than small writes take."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from mere.errors import InvalidInput

_pools: dict[str, ThreadPoolExecutor] = {}
_lock = threading.Lock()
_pid = os.getpid()


THREADS_ENV = "MERE_THREADS"


def cpu_workers() -> int:
    return max(2, machine_cores())


def machine_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """Merge workers of a read: ``$MERE_THREADS`` when set, else one per core."""
    value = positive_int(os.environ.get(THREADS_ENV), THREADS_ENV)
    return machine_cores() if value is None else value


def positive_int(raw: str | None, what: str) -> int | None:
    """A positive integer setting given as text (None when unset or blank); ``InvalidInput`` names
    ``what`` otherwise."""
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidInput(f"{what} must be a positive integer, got {raw!r}")
    return value


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """A process-wide pool by name; a forked child gets fresh pools (threads do not survive fork)."""
    global _pid
    with _lock:
        if _pid != os.getpid():
            _pools.clear()
            _pid = os.getpid()
        pool = _pools.get(name)
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"mere-{name}")
            _pools[name] = pool
        return pool
