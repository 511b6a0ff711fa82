"""The observable gauges: read from the saga log on each collection (the log, not this
process's memory, knows what is open: other writers and old runs too)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from agentsaga.telemetry.core import current
from agentsaga.telemetry.instruments import METRICS

if TYPE_CHECKING:
    from agentsaga.store import SagaLog

logger = logging.getLogger(__name__)


def observe_log(saga_log: SagaLog, meter: metrics.Meter | None = None) -> None:
    """Register the `agentsaga.steps.open` gauge: a count query on the saga log per collection
    (the log, not this process's memory, knows what is open: other writers and old runs too)."""
    def observe(_: CallbackOptions) -> Iterable[Observation]:
        try:
            counts = saga_log.open_step_counts()
        except Exception as exc:  # a collection must not fail the exporter
            logger.debug("steps.open not observed: %s", exc)
            return []
        return [Observation(n, {"agentsaga.status": str(s)}) for s, n in sorted(counts.items())]

    (meter or current().instruments.meter).create_observable_gauge(
        "agentsaga.steps.open", callbacks=[observe], unit="{step}",
        description=METRICS[2].description)
