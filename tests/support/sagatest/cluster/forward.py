"""A TCP forwarder from the test node's address to a service of the test process on loopback.

Pods reach the host on the node's address (the CNI bridge's gateway), not on 127.0.0.1, which
in a pod is the pod itself; the tests' Postgres and stand-in vendors listen on loopback. A
`Forwarder` listens on the node's address and copies bytes both ways to the loopback service,
one thread per direction and connection: what a pod then talks to is the service itself (its
protocol, its TLS, its errors), and the service sees a loopback client, as it does in every
other test.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class Forwarder:
    """Listen on `address` (a free port), forward each connection to `target`: a (host, port)
    or the path of a Unix socket (the tests' Postgres listens on one)."""

    def __init__(self, address: str, target: tuple[str, int] | str) -> None:
        self.target = target
        self._listener = socket.create_server((address, 0))
        self.address = address
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name=f"forward-{self.port}")
        self._open: set[socket.socket] = set()
        self._stopping = False

    def __enter__(self) -> Forwarder:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def start(self) -> Forwarder:
        return self.__enter__()

    def _accept(self) -> None:
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = self._connect()
            except OSError:
                client.close()
                continue
            self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def _connect(self) -> socket.socket:
        if isinstance(self.target, str):
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            return upstream
        upstream = socket.create_connection(self.target, timeout=10)
        upstream.settimeout(None)
        return upstream

    def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in list(self._open):
            with contextlib.suppress(OSError):
                sock.close()
