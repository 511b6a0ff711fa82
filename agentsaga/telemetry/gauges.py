"""The observable gauges: read from the saga log on each collection (the log, not this
process's memory, knows what is open: other writers and old runs too).

    observe_log     agentsaga.steps.open (a count per status), agentsaga.log.up
    observe_waits   the ages the alerts watch: one entry of AGE_GAUGES each, a metric over one
                    of the store's waits (`agentsaga.store.waits.WAITS`)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from agentsaga.telemetry.core import current
from agentsaga.telemetry.instruments import METRIC

if TYPE_CHECKING:
    from agentsaga.store.interfaces import Reads

logger = logging.getLogger(__name__)

Observer = Callable[[CallbackOptions], Iterable[Observation]]

AGE_GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "agentsaga.step.open.age": (
        "open_step", ("agentsaga.run_id", "agentsaga.tool", "agentsaga.status")),
    "agentsaga.human.wait.age": ("human", ("agentsaga.run_id", "agentsaga.wait.kind")),
    "agentsaga.pivot.awaiting.age": ("pivot_awaiting", ("agentsaga.run_id",)),
    "agentsaga.pivot.authorisation.age": ("pivot_authorisation", ("agentsaga.run_id",)),
}
"""metric -> (the store's wait, the attribute of each of its label columns)."""


def observe_log(saga_log: Reads, meter: metrics.Meter | None = None) -> None:
    """Register this process's view of the saga log: `agentsaga.steps.open` (a count per status)
    and `agentsaga.log.up` (whether the log answers at all), one query each per collection."""
    def observe(_: CallbackOptions) -> Iterable[Observation]:
        try:
            counts = saga_log.open_step_counts()
        except Exception as exc:  # a collection must not fail the exporter
            logger.debug("steps.open not observed: %s", exc)
            return []
        return [Observation(n, {"agentsaga.status": str(s)}) for s, n in sorted(counts.items())]

    def observe_up(_: CallbackOptions) -> Iterable[Observation]:
        try:
            saga_log.ping()
        except Exception as exc:  # LogUnavailable, a closed pool: down either way
            logger.debug("the saga log is not reachable: %s", exc)
            return [Observation(0)]
        return [Observation(1)]

    meter = meter or current().instruments.meter
    for name, callback in (("agentsaga.steps.open", observe), ("agentsaga.log.up", observe_up)):
        meter.create_observable_gauge(name, callbacks=[callback], unit=METRIC[name].unit,
                                      description=METRIC[name].description)


def _ages(saga_log: Reads, metric: str, wait: str, attributes: tuple[str, ...]) -> Observer:
    def observe(_: CallbackOptions) -> Iterable[Observation]:
        try:
            ages = saga_log.wait_ages(wait)
        except Exception as exc:  # a collection must not fail the exporter
            logger.debug("%s not observed: %s", metric, exc)
            return []
        return [Observation(age.seconds, dict(zip(attributes, age.labels, strict=True)))
                for age in ages]
    return observe


def observe_waits(saga_log: Reads, meter: metrics.Meter | None = None) -> None:
    """Register the ages the alerts watch (AGE_GAUGES), one query each per collection. The
    operator registers them (it runs while runs wait, whether or not their pods do)."""
    meter = meter or current().instruments.meter
    for metric, (wait, attributes) in AGE_GAUGES.items():
        meter.create_observable_gauge(
            metric, callbacks=[_ages(saga_log, metric, wait, attributes)],
            unit=METRIC[metric].unit, description=METRIC[metric].description)
