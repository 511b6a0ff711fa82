"""Serving the sidecar's gRPC front end: the servicer, the standard health and reflection
services, on a TCP port or a unix socket."""

from __future__ import annotations

from concurrent import futures
from dataclasses import dataclass

import grpc
from agentsaga.sidecar.grpc_adapter import SidecarServicer
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agentsaga import telemetry
from agentsaga.errors import ConfigurationError
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Sidecar"].full_name

__all__ = ["SERVICE_NAME", "Serving", "SidecarServicer", "serve"]


@dataclass
class Serving:
    server: grpc.Server
    health: health.HealthServicer
    port: int
    address: str

    def stop(self, grace: float = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()


def serve(servicer: SidecarServicer, listen: str, *, workers: int = 32) -> Serving:
    """Start the server on `listen` (host:port, port 0 for any, or unix:/path); SERVING once up."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sidecar"),
        options=[("grpc.max_receive_message_length", 8 << 20)],
        interceptors=telemetry.server_interceptors(),  # `traceparent` from the agent
    )
    pb_grpc.add_SidecarServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME), server)
    port = server.add_insecure_port(listen)
    if port == 0 and not listen.startswith("unix:"):
        raise ConfigurationError(f"cannot listen on {listen!r} (address in use?)")
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    address = listen if listen.startswith("unix:") else f"{listen.rsplit(':', 1)[0]}:{port}"
    return Serving(server, health_servicer, port, address)
