"""What this operator replica last saw of each AgentRun it resyncs, as gauges for the alerts.

    agentsaga.run.orphaned.age     per orphaned run not unwound yet: since status.orphanedAt
                                   (labels: namespace, AgentRun name, run id)
    agentsaga.run.orphan.grace     the same runs: spec.orphanGracePeriodSeconds
    agentsaga.operator.resync.age  the longest time since a run this replica handles was resynced

A run is tracked while its resync daemon runs (unfinished runs, and finished ones with corrections
that wait): a standby peer (kopf peering pauses its daemons), a finished or a deleted run reports
nothing, so only the replica that acts can page anyone. A run counts as resynced when a pass ran
or when the log watch found its saga log unchanged (`log_watch`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from agentsaga.operator.config import DEFAULT_ORPHAN_GRACE_SECONDS
from agentsaga.operator.status import Obj, parse, phase, run_id
from agentsaga.states import RunPhase
from agentsaga.telemetry.instruments import METRIC

NOT_UNWOUND: frozenset[RunPhase] = frozenset({RunPhase.ORPHANED, RunPhase.RECONCILING,
                                              RunPhase.UNWINDING, RunPhase.FAILED})
"""Phases in which an orphaned run (status.orphanedAt set) is still not unwound."""


@dataclass(frozen=True)
class Seen:
    resynced: float
    """time.monotonic() of the last finished resync pass"""
    orphaned_at: float | None = None
    """Unix time the run was orphaned, while it is not unwound"""
    grace: float = 0.0
    run_id: str = ""


class RunGauges:
    """Thread-safe: resync passes run in worker threads, collections in the exporter's."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._runs: dict[tuple[str, str], Seen] = {}
        self._lock = threading.Lock()

    def started(self, namespace: str, name: str) -> None:
        """The run's resync daemon started: its age counts from now."""
        with self._lock:
            self._runs.setdefault((namespace, name), Seen(self._monotonic()))

    def resynced(self, namespace: str, name: str, run: Obj | None) -> None:
        status = (run or {}).get("status") or {}
        orphaned = parse(status.get("orphanedAt")) if phase(run or {}) in NOT_UNWOUND else None
        grace = float(((run or {}).get("spec") or {}).get("orphanGracePeriodSeconds",
                                                          DEFAULT_ORPHAN_GRACE_SECONDS))
        seen = Seen(self._monotonic(), orphaned.timestamp() if orphaned else None, grace,
                    run_id(run) if run else name)
        with self._lock:
            self._runs[(namespace, name)] = seen

    def checked(self, namespace: str, name: str) -> None:
        """The run's saga log was checked for changes (and had none that needed a pass)."""
        with self._lock:
            seen = self._runs.get((namespace, name))
            if seen is not None:
                self._runs[(namespace, name)] = replace(seen, resynced=self._monotonic())

    def stopped(self, namespace: str, name: str) -> None:
        with self._lock:
            self._runs.pop((namespace, name), None)

    def _snapshot(self) -> dict[tuple[str, str], Seen]:
        with self._lock:
            return dict(self._runs)

    def _orphans(self) -> Iterable[tuple[dict[str, str], Seen]]:
        for (namespace, name), seen in sorted(self._snapshot().items()):
            if seen.orphaned_at is not None:
                yield {"k8s.namespace.name": namespace, "agentsaga.agentrun": name,
                       "agentsaga.run_id": seen.run_id}, seen

    def register(self, meter: metrics.Meter) -> None:
        def orphaned_age(_: CallbackOptions) -> Iterable[Observation]:
            now = self._wall()
            return [Observation(max(0.0, now - (seen.orphaned_at or now)), labels)
                    for labels, seen in self._orphans()]

        def orphan_grace(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(seen.grace, labels) for labels, seen in self._orphans()]

        def resync_age(_: CallbackOptions) -> Iterable[Observation]:
            now = self._monotonic()
            runs = self._snapshot().values()
            return [Observation(max((now - seen.resynced for seen in runs), default=0.0))]

        for name, callback in (("agentsaga.run.orphaned.age", orphaned_age),
                               ("agentsaga.run.orphan.grace", orphan_grace),
                               ("agentsaga.operator.resync.age", resync_age)):
            meter.create_observable_gauge(name, callbacks=[callback], unit="s",
                                          description=METRIC[name].description)
