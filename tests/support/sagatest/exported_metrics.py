"""The names the OpenTelemetry Prometheus exporter gives each declared metric, and how to find
the series a PromQL expression names (for the dashboard's and the alerts' tests)."""

from __future__ import annotations

import re

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from agentsaga.telemetry import METRICS
from agentsaga.telemetry.instruments import Instruments

SERIES = re.compile(r"\bagentsaga_[a-z_]+\b")
LABELS = re.compile(r"\b(by|without)\s*\([^)]*\)|\{[^}]*\}")  # grouping labels, selectors


def exported_names() -> dict[str, set[str]]:
    """Each declared metric -> the series names the Prometheus exporter renders for it."""
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    meter = provider.get_meter("agentsaga")
    instruments = Instruments(meter)
    for name, instrument in vars(instruments).items():
        if name == "meter":
            continue
        if hasattr(instrument, "add"):
            instrument.add(1, {"agentsaga.tool": "t"})
        else:
            instrument.record(1.0, {"agentsaga.tool": "t"})
    declared = {m.name for m in METRICS}

    def one(_: CallbackOptions) -> list[Observation]:
        return [Observation(1.0)]

    for metric in METRICS:  # the gauges are observed from the log or the operator's view
        if metric.kind == "gauge":
            meter.create_observable_gauge(metric.name, callbacks=[one], unit=metric.unit)
    text = generate_latest(registry).decode()
    provider.shutdown()
    out: dict[str, set[str]] = {name: set() for name in declared}
    for line in text.splitlines():
        if line.startswith("agentsaga_"):
            series = line.split("{")[0].split(" ")[0]
            for name in declared:
                if series.startswith(name.replace(".", "_")):
                    out[name].add(series)
    return out


def queried_series(expr: str) -> set[str]:
    """The agentsaga series a PromQL expression names (not its grouping labels or selectors)."""
    return set(SERIES.findall(LABELS.sub(" ", expr)))
