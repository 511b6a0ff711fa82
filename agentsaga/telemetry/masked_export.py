"""Every span leaves the process masked (`agentsaga.redact`): the exporter of `setup` is
wrapped so that each span's name, status, attributes, events (an instrumentation's recorded
exception with its message and stack trace, chained causes included) and links' attributes pass
the same redaction as the saga log, whoever recorded them (our spans, the gRPC server's,
httpx's). Imported only when spans are exported (it needs the SDK)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status

from agentsaga.redact import redact_text


class MaskedSpanExporter(SpanExporter):
    """`exporter`, sent every span masked (`masked`)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.exporter.export([masked(span) for span in spans])

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def masked(span: ReadableSpan) -> ReadableSpan:
    """A copy of `span` with every text it carries masked."""
    status = span.status
    if status.description:
        status = Status(status.status_code, redact_text(status.description))
    return ReadableSpan(
        name=redact_text(span.name), context=span.context, parent=span.parent,
        resource=span.resource, attributes=_attributes(span.attributes),
        events=[Event(redact_text(e.name), _attributes(e.attributes), e.timestamp, limit=None)
                for e in span.events],
        links=[Link(link.context, _attributes(link.attributes)) for link in span.links],
        kind=span.kind, status=status, start_time=span.start_time, end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope)


def _attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if attributes is None:
        return None
    return {key: _value(value) for key, value in attributes.items()}


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes):
        return redact_text(value.decode("utf-8", "replace")).encode()
    if isinstance(value, Mapping):
        return {k: _value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_value(v) for v in value)
    return value
