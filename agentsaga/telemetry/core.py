"""Providers, exporters and trace context.

Export is configured by the standard variables and is off unless one of them asks for it (a
sidecar with no collector stays quiet):

    OTEL_SDK_DISABLED=true                   nothing, whatever else is set
    OTEL_EXPORTER_OTLP_ENDPOINT              OTLP for traces and metrics (also the per-signal
    OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT   variants, headers, timeouts, ...)
    OTEL_EXPORTER_OTLP_PROTOCOL              grpc (default) | http/protobuf
    OTEL_TRACES_EXPORTER                     otlp | console | none
    OTEL_METRICS_EXPORTER                    otlp | prometheus | console | none
    OTEL_EXPORTER_PROMETHEUS_HOST/_PORT      the scrape endpoint (default localhost:9464)
    OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_BSP_*,
    OTEL_METRIC_EXPORT_INTERVAL              read by the SDK itself

Every exported span is masked on its way out (`masked_export`), whoever recorded it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics._internal import _ProxyMeterProvider

from agentsaga.environment import load
from agentsaga.errors import ConfigurationError
from agentsaga.settings import TelemetrySettings
from agentsaga.telemetry import payloads
from agentsaga.telemetry.instruments import Instruments

if TYPE_CHECKING:
    import grpc
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from agentsaga.store.interfaces import Reads

logger = logging.getLogger(__name__)

SCOPE = "agentsaga"
ANNOTATION = "agentsaga.io/traceparent"
"""The AgentRun annotation that carries the run's W3C traceparent."""


@dataclass(frozen=True)
class ExportConfig:
    traces: str = "none"
    """otlp | console | none"""
    metrics: str = "none"
    """otlp | prometheus | console | none"""
    protocol: str = "grpc"
    """grpc | http/protobuf (OTEL_EXPORTER_OTLP_PROTOCOL and its per-signal variants)"""
    prometheus_host: str = "localhost"
    prometheus_port: int = 9464
    record_payloads: bool = False
    """AGENTSAGA_TRACE_PAYLOADS: put redacted arguments and results on the dispatch spans."""
    redact_hook: str = ""
    """AGENTSAGA_TRACE_REDACT: module:function applied to payloads after the built-in redaction."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ExportConfig:
        spans = load(TelemetrySettings, env)
        payload, hook = spans.trace_payloads, spans.trace_redact
        if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
            return cls(record_payloads=payload, redact_hook=hook)
        endpoint = any(env.get(f"OTEL_EXPORTER_OTLP_{s}ENDPOINT") for s in ("", "TRACES_",
                                                                           "METRICS_"))
        default = "otlp" if endpoint else "none"
        traces = env.get("OTEL_TRACES_EXPORTER", default).strip().lower() or default
        metrics_ = env.get("OTEL_METRICS_EXPORTER", default).strip().lower() or default
        protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc").strip().lower()
        for name, value, allowed in (
                ("OTEL_TRACES_EXPORTER", traces, ("otlp", "console", "none")),
                ("OTEL_METRICS_EXPORTER", metrics_, ("otlp", "prometheus", "console", "none")),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol, ("grpc", "http/protobuf"))):
            if value not in allowed:
                raise ConfigurationError(f"{name}={value!r}: use one of {', '.join(allowed)}")
        try:
            port = int(env.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"))
        except ValueError:
            raise ConfigurationError("OTEL_EXPORTER_PROMETHEUS_PORT is not a number") from None
        return cls(traces, metrics_, protocol,
                   env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost"), port, payload, hook)


# the global meter provider before anything sets it (a proxy to nothing), and the no-op one
_QUIET_METER_PROVIDERS = (_ProxyMeterProvider, metrics.NoOpMeterProvider)
_QUIET_TRACER_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


class Telemetry:
    """The tracer and instruments of this process. Without providers it uses the global ones
    (no-op until something sets them), so a library user's own OTel setup is honoured."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None, *,
                 record_payloads: bool = False, redact_hook: payloads.Redactor | None = None,
                 readers: tuple[MetricReader, ...] = ()) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        self.instruments = Instruments(metrics.get_meter(SCOPE, meter_provider=meter_provider))
        self.record_payloads = record_payloads
        self.redact_hook = redact_hook
        self.readers = readers
        self.prometheus_port = 0

    @property
    def tracing(self) -> bool:
        """Whether spans are recorded somewhere (then the gRPC interceptors are worth it)."""
        provider = self.tracer_provider or trace.get_tracer_provider()
        return not isinstance(provider, _QUIET_TRACER_PROVIDERS)

    @property
    def metering(self) -> bool:
        """Whether measurements go somewhere (a meter provider that is not the no-op one)."""
        provider = self.meter_provider or metrics.get_meter_provider()
        return not isinstance(provider, _QUIET_METER_PROVIDERS)

    @property
    def quiet(self) -> bool:
        """Nothing records spans or metrics: the decorators skip building them. Checked on
        every call (cheap), so providers set later by a library user are honoured."""
        tracer_provider = self.tracer_provider or trace.get_tracer_provider()
        meter_provider = self.meter_provider or metrics.get_meter_provider()
        return (isinstance(tracer_provider, _QUIET_TRACER_PROVIDERS)
                and isinstance(meter_provider, _QUIET_METER_PROVIDERS))

    def payload(self, value: Any) -> str:
        return payloads.render(value, self.redact_hook)

    def shutdown(self) -> None:
        """Flush and stop the SDK providers (a Job calls this before it exits)."""
        for provider in (self.tracer_provider, self.meter_provider):
            stop = getattr(provider, "shutdown", None)
            if callable(stop):
                stop()


_current = Telemetry()


def current() -> Telemetry:
    return _current


def install(telemetry: Telemetry) -> Telemetry:
    """Make `telemetry` this process's; instruments outbound HTTP (httpx: every connector and
    the Stripe SDK's client) as child spans. Returns the previous one."""
    global _current
    previous, _current = _current, telemetry
    _instrument_httpx(telemetry)
    return previous


def setup(service_name: str, env: Mapping[str, str] | None = None) -> Telemetry:
    """Providers and exporters from OTEL_* (see the module docstring), installed globally."""
    env = os.environ if env is None else env
    config = ExportConfig.from_env(env)
    hook = payloads.hook_from(config.redact_hook)
    if config.traces == "none" and config.metrics == "none":
        telemetry = Telemetry(record_payloads=config.record_payloads, redact_hook=hook)
        install(telemetry)
        return telemetry
    # the SDK is imported only when something is exported (its modules cost ~5 MiB of RSS)
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from agentsaga.telemetry.masked_export import MaskedSpanExporter

    resource = Resource.create({"service.name": service_name})  # OTEL_SERVICE_NAME wins
    tracer_provider: TracerProvider | None = None
    if config.traces != "none":
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(MaskedSpanExporter(
            _span_exporter(config))))
        trace.set_tracer_provider(tracer_provider)
    meter_provider: MeterProvider | None = None
    readers: tuple[MetricReader, ...] = ()
    prometheus_port = 0
    if config.metrics != "none":
        reader, prometheus_port = _metric_reader(config)
        readers = (reader,)
        meter_provider = MeterProvider(resource=resource, metric_readers=list(readers))
        metrics.set_meter_provider(meter_provider)
    telemetry = Telemetry(tracer_provider, meter_provider, record_payloads=config.record_payloads,
                          redact_hook=hook, readers=readers)
    telemetry.prometheus_port = prometheus_port
    install(telemetry)
    logger.info("telemetry: traces %s, metrics %s (%s)", config.traces, config.metrics,
             config.protocol)
    return telemetry


def shutdown() -> None:
    _current.shutdown()


def _span_exporter(config: ExportConfig) -> Any:
    if config.traces == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if _protocol(config, "TRACES") == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcSpanExporter,
    )
    return GrpcSpanExporter()


def _metric_reader(config: ExportConfig) -> tuple[MetricReader, int]:
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    if config.metrics == "prometheus":
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        server, _ = start_http_server(config.prometheus_port, addr=config.prometheus_host)
        return PrometheusMetricReader(), int(server.server_port)
    if config.metrics == "console":
        return PeriodicExportingMetricReader(ConsoleMetricExporter()), 0
    if _protocol(config, "METRICS") == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        return PeriodicExportingMetricReader(OTLPMetricExporter()), 0
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
        OTLPMetricExporter as GrpcMetricExporter,
    )
    return PeriodicExportingMetricReader(GrpcMetricExporter()), 0


def _protocol(config: ExportConfig, signal: str) -> str:
    return os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", config.protocol).lower()


_HTTPX_INSTRUMENTATION = "opentelemetry.instrumentation.httpx"


def _instrument_httpx(telemetry: Telemetry) -> None:
    # the stable HTTP conventions (http.request.method, url.full, server.address)
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "http")
    if not telemetry.tracing and _HTTPX_INSTRUMENTATION not in sys.modules:
        return  # never instrumented, nothing to undo: not even imported (~4 MiB of RSS)
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    instrumentor = HTTPXClientInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
    if telemetry.tracing:
        instrumentor.instrument(tracer_provider=telemetry.tracer_provider,
                                meter_provider=telemetry.meter_provider)


# -- gRPC ------------------------------------------------------------------------------------


def server_interceptors() -> list[grpc.ServerInterceptor]:
    """For `grpc.server(interceptors=...)`: a server span per RPC, parented by the caller's
    `traceparent` metadata. Empty when nothing records spans (no cost on the hot path)."""
    if not _current.tracing:
        return []
    from opentelemetry.instrumentation.grpc import server_interceptor

    return [server_interceptor(  # type: ignore[no-untyped-call]
        tracer_provider=_current.tracer_provider)]


def traced_channel(channel: grpc.Channel, tracing: bool | None = None) -> grpc.Channel:
    """The agent's channel with a client span per RPC and `traceparent` in its metadata.
    `tracing=None`: only when this process records spans (else `channel` itself)."""
    if not (_current.tracing if tracing is None else tracing):
        return channel
    from opentelemetry.instrumentation.grpc import client_interceptor, grpcext

    interceptor = client_interceptor(  # type: ignore[no-untyped-call]
        tracer_provider=_current.tracer_provider)
    return grpcext.intercept_channel(  # type: ignore[no-untyped-call]
        channel, interceptor)


def aio_client_interceptors(tracing: bool | None = None) -> list[Any]:
    """The same for a `grpc.aio` channel."""
    if not (_current.tracing if tracing is None else tracing):
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors as make

    return list(make(tracer_provider=_current.tracer_provider))  # type: ignore[no-untyped-call]


# -- the run's trace context -----------------------------------------------------------------


def trace_carrier() -> dict[str, str] | None:
    """The current span context as W3C headers ({"traceparent": ...}), None if there is none."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    from opentelemetry import propagate  # here, as in `context_from_carrier`

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")} or None


def context_from_carrier(carrier: Mapping[str, Any] | None) -> otel_context.Context | None:
    if not carrier or not carrier.get("traceparent"):
        return None
    # imported here, where a carrier holds a traceparent: importing it reads the installed
    # distributions' entry points for OTEL_PROPAGATORS, which a sidecar's start-up need not
    from opentelemetry import propagate

    ctx = propagate.extract({k: str(v) for k, v in carrier.items()})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def run_context(saga_log: Reads, run_id: str) -> otel_context.Context | None:
    """The context stored with the run at BeginRun (saga_runs.trace_context), if any."""
    run = saga_log.run(run_id)
    return None if run is None else context_from_carrier(run.trace_context)


def run_annotations(trace_context: Mapping[str, Any] | None) -> dict[str, str]:
    """The AgentRun annotation for a run's stored trace context ({} when it has none)."""
    if not trace_context or not trace_context.get("traceparent"):
        return {}
    return {ANNOTATION: str(trace_context["traceparent"])}
