"""Serving the sidecar's gRPC front end: the servicer, the standard health and reflection
services, on a TCP port or a unix socket."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agentsaga import telemetry
from agentsaga.errors import ConfigurationError
from agentsaga.sidecar.access import TokenInterceptor
from agentsaga.sidecar.addresses import add_ports
from agentsaga.sidecar.grpc_adapter import SidecarServicer
from agentsaga.sidecar.worker_pool import WorkerPool
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Sidecar"].full_name

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
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME), server)
    server.start()
    for name in ("", SERVICE_NAME):
        bound.health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return bound


def serve(servicer: SidecarServicer, listen: str, *, workers: int = 32,
          hot_workers: int = 8, token: str | None = None) -> Serving:
    """Bind `listen` and serve `servicer` there at once."""
    return start(bind(listen, workers=workers, hot_workers=hot_workers, token=token), servicer)
