"""Time a thread spends waiting on something outside this process: a tool's real system, a
lookup, a person's decision, another call of the same run.

The sidecar's worker pool (`agentsaga.sidecar.worker_pool`) keeps few threads taking work and
counts a thread that has waited here for a few milliseconds as not busy, so that a queued call
gets a thread of its own instead of waiting behind a slow system. The dispatcher, reconcile,
unwind, corrections and the pivot mark their waits with `waiting()`; in any other thread (a Job,
the in-process dispatcher, the MCP endpoint's threads) it costs one attribute read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["WaitingLock", "Waits", "register", "sleep", "waiting"]


class Waits(Protocol):
    """A pool thread's record of its waits."""

    def wait_begins(self) -> None: ...

    def wait_ends(self) -> None: ...


_thread = threading.local()


def register(record: Waits) -> None:
    """Make `record` the current thread's: `waiting()` in this thread writes to it."""
    _thread.record = record


@contextmanager
def waiting() -> Iterator[None]:
    record: Waits | None = getattr(_thread, "record", None)
    if record is None or getattr(_thread, "inside", False):  # no pool, or in a wait already
        yield
        return
    _thread.inside = True
    record.wait_begins()
    try:
        yield
    finally:
        record.wait_ends()
        _thread.inside = False


def sleep(seconds: float) -> None:
    """`time.sleep`, marked as a wait."""
    with waiting():
        time.sleep(seconds)


class WaitingLock:
    """A lock whose contended acquire is marked as a wait: the thread waits for another call
    (of the same run) that is itself waiting on a real system, most of the time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        with waiting():
            return self._lock.acquire()

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> WaitingLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
