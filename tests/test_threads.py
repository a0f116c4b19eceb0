"""Shared pools and reused daemon threads."""

from __future__ import annotations

import threading
import time
from concurrent.futures import wait

from mere.concurrency import on_every_thread, run_on_daemon_thread, shared_pool, spare_threads


def test_daemon_threads_are_reused_and_survive_a_failing_task() -> None:
    seen: list[int] = []

    def fail() -> None:
        seen.append(threading.get_ident())
        raise ValueError("the task's own error")

    assert run_on_daemon_thread(fail, "mere-test").wait(10)
    deadline = time.monotonic() + 10
    while spare_threads() == 0 and time.monotonic() < deadline:  # the thread files itself as spare
        time.sleep(0.01)
    spares = spare_threads()
    assert spares >= 1
    assert run_on_daemon_thread(lambda: seen.append(threading.get_ident()), "mere-test").wait(10)
    assert len(seen) == 2
    if spares == 1:  # no other test's thread was idle: the one that failed ran the second task
        assert seen[0] == seen[1]


def test_on_every_thread_runs_once_per_started_thread_and_starts_none() -> None:
    pool = shared_pool("test-every", 16)
    list(pool.map(lambda _: time.sleep(0.01), range(3)))  # starts a few of its 16 threads
    names = {t.name for t in threading.enumerate() if t.name.startswith("mere-test-every")}
    assert 1 <= len(names) <= 3
    ran: list[str] = []
    lock = threading.Lock()

    def note() -> None:
        with lock:
            ran.append(threading.current_thread().name)

    wait(on_every_thread(["test-every", "no-such-pool"], note))
    assert sorted(ran) == sorted(names)  # each thread once: they met at the barrier
    assert {t.name for t in threading.enumerate() if t.name.startswith("mere-test-every")} == names
