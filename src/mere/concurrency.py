"""Shared, fork-aware thread pools: starting threads per call costs more than small writes take."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from mere.errors import InvalidInput

T = TypeVar("T")

_pools: dict[str, ThreadPoolExecutor] = {}
_started: dict[str, int] = {}  # threads each pool started (they live as long as the pool)
_lock = threading.Lock()
_pid = os.getpid()


THREADS_ENV = "MERE_THREADS"

# Daemon threads waiting for their next task (their inboxes), and how long one waits before it ends.
_spare: list[queue.SimpleQueue[Callable[[], None]]] = []
_spare_pid = os.getpid()
SPARE_IDLE_SECONDS = 30.0


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
            _started[name] = 0
            pool = ThreadPoolExecutor(
                max_workers=workers,
                thread_name_prefix=f"mere-{name}",
                initializer=_count_start,
                initargs=(name,),
            )
            _pools[name] = pool
        return pool


def wait_all(futures: Sequence[Future[T]]) -> tuple[list[T | None], list[BaseException]]:
    """Each future's result (None where it failed or never ran) and the errors, once every one has ended.

    An interrupt of the waiting thread (Ray cancels a task with ``KeyboardInterrupt``) does not end the wait:
    the futures not started yet are cancelled and those running are waited for, so the caller can undo
    what they did (files they wrote); the interrupt comes first among the errors."""
    results: list[T | None] = [None] * len(futures)
    errors: list[BaseException] = []
    interrupts: list[BaseException] = []
    for i, fut in enumerate(futures):
        while True:
            try:
                results[i] = fut.result()
            except BaseException as e:
                if fut.cancelled():
                    pass  # cancelled after an interrupt: it never ran
                elif fut.done() and fut.exception() is e:
                    errors.append(e)  # the future's own error
                else:  # this thread was interrupted: cancel what has not started, keep waiting
                    interrupts.append(e)
                    for other in futures:
                        other.cancel()
                    continue
            break
    return results, interrupts[:1] + errors


def on_every_thread(
    names: Sequence[str], task: Callable[[], None], timeout: float = 0.01
) -> list[Future[None]]:
    """Have each thread of the shared pools ``names`` (those that exist) run ``task`` once, without waiting
    for them (the futures tell when they did): the threads take one each as they meet at a barrier; one
    busy with other work for ``timeout`` runs its task when it is free, maybe on a thread that ran one."""
    with _lock:
        pools = [(_pools[n], _started[n]) for n in names if n in _pools and _pid == os.getpid()]
    futures: list[Future[None]] = []
    for pool, threads in pools:
        if threads:
            # as many tasks as the pool has threads: each blocks at the barrier, so each gets a thread
            meet = threading.Barrier(threads)
            futures += [pool.submit(_met, meet, timeout, task) for _ in range(threads)]
    return futures


def _count_start(name: str) -> None:
    with _lock:
        _started[name] += 1


def _met(meet: threading.Barrier, timeout: float, task: Callable[[], None]) -> None:
    with contextlib.suppress(threading.BrokenBarrierError):  # a thread busy elsewhere: the rest go on
        meet.wait(timeout)
    task()


def run_on_daemon_thread(task: Callable[[], None], name: str) -> threading.Event:
    """Run ``task`` on a daemon thread: an idle one left by an earlier task, else a new one; the event is
    set when it returns.

    Daemon, so that a task blocked forever (a stream abandoned half-read) never holds up the interpreter's
    exit; reused, so that each scan does not start threads of its own: Arrow's allocator keeps freed
    memory per thread, which a new thread cannot reuse (and starting threads costs time). A thread idle
    for ``SPARE_IDLE_SECONDS`` ends. ``task`` must handle its own errors (one that escapes is dropped).
    """
    global _spare_pid
    finished = threading.Event()

    def wrapped() -> None:
        try:
            task()
        except BaseException:  # the task reports its own errors; the thread must live on
            pass
        finally:
            finished.set()

    with _lock:
        if _spare_pid != os.getpid():  # a forked child: the parent's threads are not here
            _spare.clear()
            _spare_pid = os.getpid()
        inbox = _spare.pop() if _spare else None
    if inbox is not None:
        inbox.put(wrapped)
        return finished
    inbox = queue.SimpleQueue()
    inbox.put(wrapped)
    threading.Thread(target=_serve, args=(inbox,), name=name, daemon=True).start()
    return finished


def _serve(inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
    while True:
        try:
            task = inbox.get(timeout=SPARE_IDLE_SECONDS)
        except queue.Empty:
            with _lock:
                if any(q is inbox for q in _spare):
                    _spare.remove(inbox)
                    return
            task = inbox.get()  # taken from the spares just now: its task is on the way
        task()
        with _lock:
            _spare.append(inbox)


def spare_threads() -> int:
    """Daemon threads idle, waiting for a task of :func:`run_on_daemon_thread`."""
    with _lock:
        return len(_spare)
