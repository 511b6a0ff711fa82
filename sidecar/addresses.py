"""Taking the sidecar's address (`--listen`), every address a host name stands for or none.

gRPC binds each address a host name resolves to and serves if any of them worked: with
127.0.0.1:PORT held by another process, `localhost:PORT` would bind [::1]:PORT alone and serve
there, out of reach of every IPv4 client. Here each address is bound on its own, and one that
is taken fails the whole address, naming it. An address whose family this host lacks (no IPv6)
is skipped, as asyncio's servers skip it.
"""

from __future__ import annotations

import errno
import os
import socket

import grpc

from agentsaga.errors import ConfigurationError

LOOPBACKS = ("127.0.0.1", "::1")
"""What `localhost` stands for: gRPC's own resolver binds both, whatever /etc/hosts says."""

_FAMILY_MISSING = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)


def add_ports(server: grpc.Server, listen: str) -> int:
    """Add `listen` (host:port, port 0 for any free port, or unix:/path) to `server`; the port
    it serves on. ConfigurationError, naming the address, when any address of the host is taken
    or none can be bound."""
    if listen.startswith("unix:"):
        added = _added(server, listen)
        if added == 0:
            raise ConfigurationError(
                f"cannot listen on {listen!r}: the socket is in use (another sidecar?) or its "
                "folder is not writable")
        return added
    host, _, port_text = listen.rpartition(":")
    port, bound = int(port_text), 0
    for address in addresses(host.strip("[]"), listen):
        got = _added(server, f"[{address}]:{port}" if ":" in address else f"{address}:{port}")
        if got:
            port, bound = got, bound + 1
            continue
        why = bind_errno(address, port)
        if why in _FAMILY_MISSING:
            continue  # this host has no such address family (IPv6 switched off)
        raise ConfigurationError(_taken(listen, address, port, why))
    if not bound:
        raise ConfigurationError(
            f"cannot listen on {listen!r}: none of its addresses can be bound on this host; "
            "choose another with --listen / AGENTSAGA_LISTEN")
    return port


def addresses(host: str, listen: str) -> list[str]:
    """The addresses `host` stands for: both loopbacks for localhost, else what it resolves to
    (an IP address stands for itself)."""
    if host.lower() == "localhost":
        return list(LOOPBACKS)
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigurationError(
            f"cannot listen on {listen!r}: the host {host!r} does not resolve ({exc.strerror}); "
            "use an IP address or a name of this host") from None
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def bind_errno(address: str, port: int) -> int:
    """Why binding `address`:`port` fails (an errno; 0 if it does not), asked of the operating
    system the way gRPC binds (SO_REUSEADDR: a port left in TIME_WAIT is free)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        probe = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        return exc.errno or errno.EAFNOSUPPORT
    with probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            return exc.errno or errno.EADDRINUSE
    return 0


def _added(server: grpc.Server, address: str) -> int:
    try:
        return int(server.add_insecure_port(address))
    except RuntimeError:  # grpcio >= 1.60 raises where older versions returned 0
        return 0


def _taken(listen: str, address: str, port: int, why: int) -> str:
    if why == errno.EACCES:
        return (f"cannot listen on {listen!r}: port {port} on {address} needs privileges this "
                "process lacks; choose a port above 1023 with --listen / AGENTSAGA_LISTEN")
    if why in (errno.EADDRINUSE, 0):  # 0: free again by now, so it was taken a moment ago
        return (f"cannot listen on {listen!r}: port {port} in use (another sidecar?) on "
                f"{address}; stop it or choose another port with --listen / AGENTSAGA_LISTEN")
    return (f"cannot listen on {listen!r}: port {port} on {address}: {os.strerror(why)}; "
            "choose another address with --listen / AGENTSAGA_LISTEN")
