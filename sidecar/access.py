"""Who may knock on the sidecar's front doors (gRPC and MCP).

On loopback (or a unix socket) only the pod's own containers reach the sidecar. Any other
listener is reachable by whatever reaches the pod's IP, so it requires the per-pod bearer token
(`AGENTSAGA_ACCESS_TOKEN_FILE`, mounted from a Secret by the chart): a request without it, or
with another, is refused (UNAUTHENTICATED / 401) before it reaches the service, and the
sidecar refuses to start on such an address without a token. Health checks stay open (the
kubelet's gRPC probe carries no credentials); they reveal nothing about runs.

MCP also checks `Host` and `Origin` on every listen address (DNS rebinding): allowed are the
listen address itself, the loopback names when it is loopback, and the names configured in
AGENTSAGA_MCP_ALLOWED_HOSTS. The MCP library is imported when that check is built, not with
this module: the gRPC server imports `TokenInterceptor` from here, and a sidecar with MCP off
loads none of the MCP server stack (about 300 modules, 30 MiB resident).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from agentsaga.errors import ConfigurationError
from agentsaga.settings import Settings

if TYPE_CHECKING:  # the MCP server stack is imported only by a sidecar that serves MCP
    from mcp.server.transport_security import TransportSecuritySettings

HEALTH_PREFIX = "/grpc.health.v1.Health/"
"""The gRPC methods served without the token: the kubelet's probe cannot carry one."""

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

MISSING = ("this sidecar listens on {listen!r}, not loopback: every request needs the pod's "
           "access token (metadata `authorization: Bearer <token>`; the client sends it when "
           "AGENTSAGA_ACCESS_TOKEN_FILE is set)")
WRONG = ("the access token presented is not this sidecar's (AGENTSAGA_ACCESS_TOKEN_FILE of the "
         "pod); nothing was read or written")


def is_loopback(listen: str) -> bool:
    """Whether `listen` (host:port or unix:/path) is reachable from the pod alone."""
    if listen.startswith("unix:"):
        return True
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def required_token(settings: Settings, listens: Sequence[str]) -> str | None:
    """The token the non-loopback listeners among `listens` check, None when all are loopback.
    ConfigurationError, naming the setting, when one is not loopback and no token is set."""
    remote = [listen for listen in listens if listen and not is_loopback(listen)]
    if not remote:
        return None
    if not settings.access_token:
        raise ConfigurationError(
            f"refusing to listen on {remote[0]!r} without an access token: a non-loopback "
            "listener serves whoever reaches the pod. Set AGENTSAGA_ACCESS_TOKEN_FILE to a file "
            "holding the pod's token (the chart mounts one from a Secret per agent namespace), "
            "or listen on loopback.")
    return settings.access_token


def token_matches(expected: str, authorization: str | None) -> bool:
    """`authorization` is `Bearer <expected>`, compared in constant time."""
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        presented = ""
    return hmac.compare_digest(presented.strip().encode(), expected.encode())


# -- gRPC ----------------------------------------------------------------------------------


class TokenInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Every RPC but health carries the token, or it is refused with UNAUTHENTICATED."""

    def __init__(self, token: str, listen: str) -> None:
        self._token = token
        self._listen = listen

    def intercept_service(self, continuation: Callable[[Any], Any],
                          details: grpc.HandlerCallDetails) -> Any:
        if details.method.startswith(HEALTH_PREFIX):
            return continuation(details)
        metadata = dict(details.invocation_metadata or ())
        presented = metadata.get("authorization")
        if isinstance(presented, str) and token_matches(self._token, presented):
            return continuation(details)
        message = WRONG if presented else MISSING.format(listen=self._listen)
        handler = continuation(details)
        return _refusal(handler, message)


def _refusal(handler: Any, message: str) -> Any:
    """A handler of the same shape as `handler` that answers UNAUTHENTICATED."""
    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler is None:
        return grpc.unary_unary_rpc_method_handler(refuse)
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(
            refuse, handler.request_deserializer, handler.response_serializer)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(
            refuse, handler.request_deserializer, handler.response_serializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(
            refuse, handler.request_deserializer, handler.response_serializer)
    return grpc.unary_unary_rpc_method_handler(
        refuse, handler.request_deserializer, handler.response_serializer)


# -- MCP (ASGI) ----------------------------------------------------------------------------

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def transport_security(host: str, allowed: Sequence[str]) -> TransportSecuritySettings:
    """Host and Origin checked whatever the listen address: the address itself, the loopback
    names when it is loopback, and the configured names, each on any port."""
    shown = f"[{host}]" if ":" in host else host
    names = [shown, *allowed]
    if is_loopback(f"{shown}:0") or host in ("0.0.0.0", "::"):
        # a wildcard address includes loopback: an in-pod client names it
        names += LOOPBACK_NAMES
    names = list(dict.fromkeys(names))
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[n for name in names for n in (name, f"{name}:*")],
        allowed_origins=[f"{scheme}://{name}{port}" for name in names
                         for scheme in ("http", "https") for port in ("", ":*")])


class BearerToken:
    """ASGI middleware: every HTTP request carries the token, or 401 with the reason."""

    def __init__(self, app: ASGIApp, token: str, listen: str) -> None:
        self.app = app
        self._token = token
        self._listen = listen

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", ())}
        presented = headers.get("authorization")
        if presented and token_matches(self._token, presented):
            await self.app(scope, receive, send)
            return
        body = (WRONG if presented else MISSING.format(listen=self._listen)).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"www-authenticate", b'Bearer realm="agentsaga-sidecar"'),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
