"""One action at a time per run in this process, and no lock left behind.

A run's lock exists only while someone holds it or waits for it: the last one out removes it.
So a lookup of a run that never existed, or a run that ended, leaves nothing behind, however
many runs an agent names (the lock table is as large as the calls in flight).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from agentsaga.waiting import WaitingLock


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = WaitingLock()
        self.users = 0


class RunLocks:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._guard = threading.Lock()

    def __len__(self) -> int:
        """The runs whose lock is held or waited for now."""
        with self._guard:
            return len(self._entries)

    @contextmanager
    def hold(self, run_id: str, *,
             on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the run's lock for the block; `on_wait` is called before waiting for another
        holder."""
        entry = self._enter(run_id)
        try:
            if not entry.lock.acquire(blocking=False):
                if on_wait is not None:
                    on_wait()
                entry.lock.acquire()
            try:
                yield
            finally:
                entry.lock.release()
        finally:
            self._leave(run_id, entry)

    def _enter(self, run_id: str) -> _Entry:
        with self._guard:
            entry = self._entries.get(run_id)
            if entry is None:
                entry = self._entries[run_id] = _Entry()
            entry.users += 1
            return entry

    def _leave(self, run_id: str, entry: _Entry) -> None:
        with self._guard:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[run_id]
