"""`traced`: the product's telemetry (`agentsaga.telemetry.install`) on in-memory exporters for
one test, so that its spans and metrics can be asserted; the previous telemetry is put back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentsaga import telemetry


@dataclass
class Traced:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    telemetry: telemetry.Telemetry

    def named(self, name: str) -> list[dict[str, Any]]:
        """The attributes of every finished span called `name`, in the order they ended."""
        found: list[ReadableSpan] = [s for s in self.spans.get_finished_spans()
                                     if s.name == name]
        return [dict(s.attributes or {}) for s in found]

    def counted(self, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
        """The counter `name`'s value by its sorted attributes (zero points included); empty
        when nothing at all has been measured yet."""
        data = self.metrics.get_metrics_data()
        if data is None:
            return {}
        return {tuple(sorted((p.attributes or {}).items())): p.value
                for rm in data.resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics if m.name == name for p in m.data.data_points
                if isinstance(p, NumberDataPoint)}


@pytest.fixture
def traced() -> Iterator[Traced]:
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    tel = telemetry.Telemetry(tracer_provider, MeterProvider(metric_readers=[reader]),
                              record_payloads=True)
    previous = telemetry.install(tel)
    try:
        yield Traced(spans, reader, tel)
    finally:
        telemetry.install(previous)
