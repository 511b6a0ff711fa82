"""Group commit of outcome rows (`AGENTSAGA_OUTCOME_COMMIT=group`): the outcomes of concurrent
dispatches written as one multi-row fenced UPDATE (`StepStatements.write_outcomes`), each
dispatch answered only once its own row is in a committed batch (R5, R11).

No dedicated writer thread and no timer: a dispatch that finds no batch in flight is the leader
and writes whatever is queued at once (a lone dispatch writes its own row straight away, as
today's path does); a dispatch that arrives while a batch is in flight queues and waits. When
the leader's batch commits it releases every dispatch in it with its own answer and, if more
are queued, wakes the first of them to lead the next batch. A dispatch therefore waits for at
most the batch in flight and its own; the queue holds at most `max_queue` rows (a dispatch
beyond that waits for room) and a batch at most `max_batch`.

Crash at any line: the call's effect happened and its row is INTENDED until the batch that
holds it commits; that is the state today's path has before its own UPDATE commits, and no
dispatch is answered before its batch commits, so reconcile settles such a row by its key (R7)
exactly as it settles one left by today's path. A batch that fails leaves every row in it as it
was (one statement, one transaction).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_BATCH = 64
MAX_QUEUE = 1024


@dataclass(eq=False)
class Pending:
    """One dispatch's outcome on its way into a batch, and what the batch said about it."""

    run_id: str
    step_idx: int
    params: dict[str, Any]
    """The row's values for the statement (`StepStatements.write_outcomes`)."""
    answer: tuple[Any, ...] | None = None
    """The run's epoch and state, then the written columns (NULLs when nothing was written)."""
    error: BaseException | None = None
    """Why the batch holding this row failed (the row is then unchanged)."""
    done: bool = False
    wake: threading.Event = field(default_factory=threading.Event)


class GroupCommit:
    """The queue of one saga log's outcome writes. Thread-safe.

    `write(batch)` writes the batch and sets each row's `answer` or `error`; it must not
    raise (whatever it raises anyway becomes every unanswered row's error)."""

    def __init__(self, write: Callable[[list[Pending]], None], *, max_batch: int = MAX_BATCH,
                 max_queue: int = MAX_QUEUE) -> None:
        self._write = write
        self._max_batch = max_batch
        self._max_queue = max_queue
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._queue: deque[Pending] = deque()
        self._writing = False
        self.batches = 0
        """Batches written so far (with `rows`: the mean batch size, for the bench)."""
        self.rows = 0

    @property
    def queued(self) -> int:
        """Rows waiting for a batch (not the one in flight)."""
        with self._lock:
            return len(self._queue)

    def submit(self, item: Pending) -> None:
        """Return once `item`'s batch has committed or failed (its `answer` or `error`)."""
        with self._room:
            while len(self._queue) >= self._max_queue:
                self._room.wait()
            self._queue.append(item)
            lead = not self._writing
            self._writing = True
        if not lead:
            item.wake.wait()  # set when its batch is done, or when it is to lead the next one
            if item.done:
                return
        while not item.done:
            self._flush()
        self._hand_over()

    def _flush(self) -> None:
        with self._room:
            batch = self._take()
            self._room.notify_all()
        try:
            self._write(batch)
        except BaseException as exc:  # noqa: BLE001 - handed to every dispatch of the batch
            for pending in batch:
                if pending.answer is None and pending.error is None:
                    pending.error = exc
        finally:
            with self._lock:
                self.batches += 1
                self.rows += len(batch)
            for pending in batch:
                pending.done = True
                pending.wake.set()

    def _take(self) -> list[Pending]:
        """Up to `max_batch` queued rows, oldest first, at most one per step (a second outcome
        of the same row waits for the next batch, as it would wait for the first's UPDATE)."""
        batch: list[Pending] = []
        keys: set[tuple[str, int]] = set()
        deferred: list[Pending] = []
        while self._queue and len(batch) < self._max_batch:
            pending = self._queue.popleft()
            key = (pending.run_id, pending.step_idx)
            if key in keys:
                deferred.append(pending)
            else:
                keys.add(key)
                batch.append(pending)
        self._queue.extendleft(reversed(deferred))
        return batch

    def _hand_over(self) -> None:
        """The leader's own row is written: the first queued row leads the next batch."""
        with self._lock:
            if self._queue:
                self._queue[0].wake.set()
            else:
                self._writing = False
