"""Serving the sidecar's gRPC front end: the servicer, the standard health and reflection
services, on a TCP port or a unix socket. The reflection service (a tool's, `grpcurl`) is built
at its first call: importing its library costs a start-up a tenth of a second and 3-4 MiB of
resident memory (15 MiB at the import's peak) that an agent's calls never use."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentsaga import telemetry
from agentsaga.errors import ConfigurationError
from agentsaga.sidecar.access import TokenInterceptor
from agentsaga.sidecar.addresses import add_ports
from agentsaga.sidecar.grpc_adapter import SidecarServicer
from agentsaga.sidecar.worker_pool import WorkerPool
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Sidecar"].full_name
REFLECTION_SERVICE = "grpc.reflection.v1alpha.ServerReflection"
"""grpc_reflection's SERVICE_NAME, named here without importing it (a test compares the two)."""

__all__ = ["SERVICE_NAME", "Serving", "SidecarServicer", "bind", "serve", "start"]


@dataclass
class Serving:
    server: grpc.Server
    health: health.HealthServicer
    port: int
    address: str
    workers: WorkerPool

    def stop(self, grace: float = 2.0) -> None:
        """New RPCs refused at once, those in flight cancelled after `grace`; returns once
        every call has returned (a tool call's outcome recorded)."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        self.workers.shutdown(wait=True)


def bind(listen: str, *, workers: int = 32, hot_workers: int = 8,
         token: str | None = None) -> Serving:
    """Take `listen` (host:port, port 0 for any, or unix:/path) before anything else, so that a
    taken port is reported at once, not after the wait for Postgres. Nothing is served until
    `start`; health says NOT_SERVING until then. RPCs run on at most `workers` threads, of which
    `hot_workers` take work while calls are quick (`worker_pool`). With `token`, every RPC but
    health carries it (`access.TokenInterceptor`)."""
    pool = WorkerPool(hot=min(hot_workers, workers), most=workers, name="sidecar")
    server = grpc.server(
        pool,  # grpc calls only `submit`
        # no SO_REUSEPORT: a second sidecar on a taken port must fail, not share it
        options=[("grpc.max_receive_message_length", 8 << 20), ("grpc.so_reuseport", 0)],
        # `traceparent` from the agent; the token, first, when the address is not loopback
        interceptors=[*([TokenInterceptor(token, listen)] if token is not None else []),
                      *telemetry.server_interceptors()],
    )
    try:  # every address of the host, or none: never half of `localhost`
        port = add_ports(server, listen)
    except ConfigurationError:
        server.stop(None)
        pool.shutdown(wait=False)
        raise
    health_servicer = health.HealthServicer()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    address = listen if listen.startswith("unix:") else f"{listen.rsplit(':', 1)[0]}:{port}"
    return Serving(server, health_servicer, port, address, pool)


def start(bound: Serving, servicer: SidecarServicer) -> Serving:
    """Serve `servicer` (and health, reflection) on the address `bind` took; SERVING once up."""
    server = bound.server
    pb_grpc.add_SidecarServicer_to_server(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(bound.health, server)
    server.add_generic_rpc_handlers((LazyReflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         REFLECTION_SERVICE)),))
    server.start()
    for name in ("", SERVICE_NAME):
        bound.health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return bound


def serve(servicer: SidecarServicer, listen: str, *, workers: int = 32,
          hot_workers: int = 8, token: str | None = None) -> Serving:
    """Bind `listen` and serve `servicer` there at once."""
    return start(bind(listen, workers=workers, hot_workers=hot_workers, token=token), servicer)


class LazyReflection(grpc.GenericRpcHandler):  # type: ignore[misc]
    """The reflection service of `service_names`, as `enable_server_reflection` adds it, made at
    its first call (grpc asks a generic handler only for methods no registered one serves)."""

    def __init__(self, service_names: Sequence[str]) -> None:
        self.service_names = tuple(service_names)
        self._handler: grpc.GenericRpcHandler | None = None
        self._lock = threading.Lock()

    def service(self, handler_call_details: grpc.HandlerCallDetails
                ) -> grpc.RpcMethodHandler | None:
        method: str = getattr(handler_call_details, "method", "") or ""
        if not method.startswith(f"/{REFLECTION_SERVICE}/"):
            return None
        with self._lock:
            if self._handler is None:
                self._handler = _reflection_handler(self.service_names)
        return self._handler.service(handler_call_details)


class _Handlers:
    """Takes the handlers a generated `add_*_to_server` adds, in place of a server."""

    def __init__(self) -> None:
        self.generic: list[grpc.GenericRpcHandler] = []

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        pass  # the generic handler serves the same methods


def _reflection_handler(service_names: Sequence[str]) -> grpc.GenericRpcHandler:
    from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

    handlers = _Handlers()
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.ReflectionServicer(service_names), handlers)
    [handler] = handlers.generic
    return handler
