"""Which runs of the saga log the binding loop (`run_binding.follow_log`) binds in each round,
besides those the log announces (LISTEN/NOTIFY):

- at start-up, and after the LISTEN connection was lost, every open run, a batch of
  AGENTSAGA_OPERATOR_RESYNC_BATCH per statement (notifications sent meanwhile are gone);
- every round (a resync interval without a notification), the runs changed since the previous
  round began: a notification sent between two LISTEN connections is not lost;
- the next slice of the open runs in run-id order, sized by the time since the last round so
  that the walk covers every open run once per AGENTSAGA_OPERATOR_FULL_RESYNC_SECONDS (a net
  for what no notification says: a binding undone, a policy changed): a steady cost, not a
  burst per round;
- the runs whose binding failed in the previous round.

An idle log therefore costs one statement per round and the binding of a few open runs, not a
binding of every open run per round.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator

from agentsaga.settings import OperatorSettings
from agentsaga.store import Run
from agentsaga.store.interfaces import OperatorStore

logger = logging.getLogger(__name__)


class OpenRunWalk:
    """Used by the binding loop's thread only."""

    def __init__(self, saga_log: OperatorStore, config: OperatorSettings,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.saga_log = saga_log
        self.batch = config.resync_batch
        self.interval = config.resync_seconds
        self.full_interval = config.full_resync_seconds
        self._monotonic = monotonic
        self._whole = True
        """Walk every open run in the next round (start-up, a lost LISTEN connection)."""
        self._cursor = ""
        """The run id the next slice continues after ("" : from the start)."""
        self._open = 0
        """Open runs the last complete walk found: sizes the slices."""
        self._walked = 0
        """Open runs the current walk of slices has found so far."""
        self._round_began = 0.0
        self._credit = 0.0
        """Runs the walk owes: a fraction of a run per round adds up."""
        self.failed: set[str] = set()
        """Runs whose binding failed: bound again in the next round."""

    def lost(self) -> None:
        """The LISTEN connection failed: the next round walks every open run."""
        self._whole = True

    def round(self) -> Iterator[Run]:
        """The runs to bind in this round, each once."""
        began = self._monotonic()
        elapsed = began - self._round_began
        since = elapsed + self.interval  # a statement's commit may lag
        self._round_began = began
        if self._whole:
            self._whole = False
            count = 0
            for run in self._everything():
                count += 1
                yield run
            self._open, self._cursor, self._walked, self._credit = count, "", 0, 0.0
            logger.info("bound the AgentRuns of every open run in the saga log (%d)", count)
            return
        seen: set[str] = set()
        retry, self.failed = self.failed, set()
        changed = self.saga_log.runs_changed_since(since)
        again = [r for r in (self.saga_log.run(i) for i in sorted(retry)) if r is not None]
        for run in [*changed, *again, *self._slice(elapsed)]:
            if run.run_id not in seen:
                seen.add(run.run_id)
                yield run

    def _everything(self) -> Iterator[Run]:
        after = ""
        while True:
            runs = self.saga_log.open_runs(after, self.batch)
            yield from runs
            if len(runs) < self.batch:
                return
            after = runs[-1].run_id

    def _slice(self, elapsed: float) -> list[Run]:
        """The next slice of the open runs, as many as `elapsed` seconds of the walk owe (none
        yet: no statement); at the end of the ids, the walk starts over."""
        owed = max(self._open, 1) * elapsed / self.full_interval
        self._credit = min(self._credit + owed, float(self.batch))
        size = math.floor(self._credit)
        if size < 1:
            return []
        self._credit -= size
        runs = self.saga_log.open_runs(self._cursor, size)
        self._walked += len(runs)
        if len(runs) < size:
            self._open, self._cursor, self._walked = self._walked, "", 0
        else:
            self._cursor = runs[-1].run_id
        return runs
