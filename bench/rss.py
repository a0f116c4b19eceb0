"""Peak resident memory of this process while a block runs, sampled every 2 ms by a thread.

Benchmarks run what they measure in a fresh process (ru_maxrss would be inherited from the parent across
fork/exec on Linux), import this there and report ``growth`` = peak - RSS before the block.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

import psutil


class PeakRss:
    def __enter__(self) -> PeakRss:
        self._proc = psutil.Process()
        self.before = self._proc.memory_info().rss
        self.peak = self.before
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.002)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.before
