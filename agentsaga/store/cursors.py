"""The run cursors of one process: each run's newest step, as this process last wrote it.

A dispatch of a run this process holds (R12 epoch) and wrote last needs no read of the log: the
cursor says what the newest step is. A cursor is kept only for a running run with no pivot
record (a human's pivot decision is the one write that needs no epoch) and dropped on every
other write of this process to the run, and on Fenced/RunEnded. A writer elsewhere must bump the
epoch first, and then the next write under the old epoch is refused, so acting on a cursor never
writes past one.
"""

from __future__ import annotations

import threading

from agentsaga.store.records import Run, Step


class Cursors:
    def __init__(self) -> None:
        self._cursors: dict[str, tuple[Run, Step | None]] = {}
        self._generation = 0
        self._lock = threading.Lock()

    @property
    def generation(self) -> int:
        """Changes on every forget: a read that started before one must not be remembered."""
        return self._generation

    def remember(self, run: Run, step: Step | None, generation: int) -> None:
        """Keep what a read found, unless the run is not cacheable or a write came between."""
        if run.state != "running" or run.pivot is not None:
            return
        with self._lock:
            if generation == self._generation:
                self._cursors[run.run_id] = (run, step)

    def get(self, run_id: str, epoch: int) -> tuple[Run, Step | None] | None:
        with self._lock:
            found = self._cursors.get(run_id)
        if found is None or found[0].owner_epoch != epoch:
            return None
        return found

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._generation += 1
            self._cursors.pop(run_id, None)

    def advance(self, run_id: str, step: Step) -> None:
        """A step this process just wrote becomes the cursor's newest if it is the newest."""
        with self._lock:
            found = self._cursors.get(run_id)
            if found is not None and found[0].owner_epoch == step.writer_epoch and (
                    found[1] is None or found[1].step_idx <= step.step_idx):
                self._cursors[run_id] = (found[0], step)
            else:
                self._generation += 1
                self._cursors.pop(run_id, None)
