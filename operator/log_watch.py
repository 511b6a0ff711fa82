"""One change-check for every unfinished AgentRun, instead of a timer per run, and the bounded
resync that walks them.

Each resync daemon registers its run and sleeps until woken. Every
`AGENTSAGA_OPERATOR_RESYNC_SECONDS` one loop
- reads the saga-log fingerprint (`SagaLog.log_fingerprints`: state, epoch, pivot, step
  statuses, pending corrections) of up to `AGENTSAGA_OPERATOR_RESYNC_BATCH` runs per statement
  and wakes only the daemons whose fingerprint moved since their last pass;
- wakes the next few registered runs in turn for a full pass (the net for what no event
  reports: a pod deleted while a watch was down), as many as make every run pass once per
  `AGENTSAGA_OPERATOR_FULL_RESYNC_SECONDS`: a steady trickle, never a burst.
Watch events on the AgentRun wake its daemon too, unless a pass has seen what the event shows
(its own status write, kopf's finalizer and annotations). Finished runs have no daemon
(`runs.needs_daemon`), so they are not checked at all; with nothing registered the loop ends, so
an idle operator with only finished runs makes no request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agentsaga.operator.gauges import RunGauges
from agentsaga.operator.status import Obj
from agentsaga.store.fingerprints import LogFingerprint
from agentsaga.store.interfaces import OperatorStore

logger = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, AgentRun name)"""


def content(body: Obj) -> str:
    """What of an AgentRun a resync pass acts on, as a digest: its spec, status, generation and
    deletion; not metadata that kopf keeps (finalizers, annotations) or the resourceVersion."""
    meta = body.get("metadata") or {}
    shown = [body.get("spec"), body.get("status"), meta.get("generation"),
             meta.get("deletionTimestamp")]
    return hashlib.sha256(json.dumps(shown, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Watched:
    run_id: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    fingerprint: LogFingerprint | None = None
    """As the run's last pass read it; None: not in the log then (any row wakes it)."""
    seen: str = ""
    """`content` of the object as the run's last pass left it: a watch event showing the same
    (the pass's own write, kopf's finalizer or annotations) wakes nobody."""


class LogWatch:
    """Lives on kopf's event loop: every method is called from it."""

    def __init__(self, saga_log: OperatorStore | None, interval: float, batch: int,
                 gauges: RunGauges, full_interval: float) -> None:
        self.saga_log = saga_log
        self.interval = interval
        self.batch = batch
        self.gauges = gauges
        self.full_interval = full_interval
        self._runs: dict[Key, Watched] = {}
        self._due: deque[Key] = deque()
        """The runs the bounded resync has still to wake in its current walk."""
        self._credit = 0.0
        """Wakes the walk owes: a fraction of a run per interval adds up."""
        self._loop: asyncio.Task[None] | None = None

    def register(self, key: Key, run_id: str) -> asyncio.Event:
        watched = self._runs.setdefault(key, Watched(run_id))
        watched.run_id = run_id
        if self._loop is None or self._loop.done():
            self._loop = asyncio.create_task(self._check_forever(), name="agentsaga-log-watch")
        return watched.wake

    def unregister(self, key: Key) -> None:
        self._runs.pop(key, None)

    def passed(self, key: Key, fingerprint: LogFingerprint | None, body: Obj) -> None:
        """A resync pass of this run read `fingerprint` and left the object as `body`."""
        watched = self._runs.get(key)
        if watched is not None:
            watched.fingerprint = fingerprint
            watched.seen = content(body)

    def object_changed(self, key: Key, body: Obj) -> None:
        """A watch event of the AgentRun: wake its daemon unless a pass has seen what it shows."""
        watched = self._runs.get(key)
        if watched is not None and content(body) != watched.seen:
            watched.wake.set()

    def wake(self, key: Key) -> None:
        """Wake the run's daemon for a pass, whatever its object shows."""
        watched = self._runs.get(key)
        if watched is not None:
            watched.wake.set()

    async def sleep(self, key: Key, stopped: Callable[[], Awaitable[object]],
                    seconds: float | None) -> None:
        """Until the run is woken, its daemon is stopped, or `seconds` pass (None: no limit)."""
        watched = self._runs[key]
        waiters: set[asyncio.Future[object]] = {asyncio.ensure_future(watched.wake.wait()),
                                                asyncio.ensure_future(stopped())}
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            watched.wake.clear()

    async def check_once(self) -> int:
        """One walk over every registered run, a statement per batch; returns how many woke."""
        assert self.saga_log is not None
        keys = list(self._runs)
        woke = 0
        for start in range(0, len(keys), self.batch):
            chunk = [(k, self._runs[k]) for k in keys[start:start + self.batch] if k in self._runs]
            found = await asyncio.to_thread(self.saga_log.log_fingerprints,
                                            sorted({w.run_id for _, w in chunk}))
            for key, watched in chunk:
                now = found.get(watched.run_id)
                if now is not None and now != watched.fingerprint:
                    watched.fingerprint = now  # woken once per change
                    watched.wake.set()
                    woke += 1
                self.gauges.checked(*key)
        return woke

    def walk_once(self) -> int:
        """Wake the next runs of the bounded resync's walk; returns how many."""
        count = len(self._runs)
        self._credit = min(self._credit + count * self.interval / self.full_interval, count)
        due = math.floor(self._credit)
        self._credit -= due
        woke = 0
        while woke < due:
            if not self._due:  # a new walk over the runs registered now
                self._due.extend(self._runs)
            watched = self._runs.get(self._due.popleft())
            if watched is not None:
                watched.wake.set()
                woke += 1
        return woke

    async def _check_forever(self) -> None:
        while self._runs:
            await asyncio.sleep(self.interval)
            self.walk_once()
            if self.saga_log is None:
                continue
            try:
                await self.check_once()
            except Exception as exc:  # Postgres away: the next round tries again
                logger.warning("checking the saga log of %d runs failed: %s",
                               len(self._runs), exc)
