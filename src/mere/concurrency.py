"""Shared, fork-aware thread pools: starting threads per call costs more than small writes take."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_pools: dict[str, ThreadPoolExecutor] = {}
_lock = threading.Lock()
_pid = os.getpid()


def cpu_workers() -> int:
    return max(2, os.cpu_count() or 2)


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
