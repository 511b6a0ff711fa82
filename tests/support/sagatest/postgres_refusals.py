"""A TCP server that speaks just enough of Postgres's wire protocol to refuse every connection
with one error, as a real server does before any query: "the database system is starting up"
(57P03, what a server in crash recovery answers) or "password authentication failed" (28P01).
A real server cannot be held in either state on demand; libpq reads these answers exactly as it
reads a real server's (its ping, its error message).

    with refusing_postgres(STARTING_UP) as dsn:
        ...  # every connection to `dsn` is refused with 57P03
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    sqlstate: str
    message: str


STARTING_UP = Refusal("57P03", "the database system is starting up")
BAD_PASSWORD = Refusal("28P01", 'password authentication failed for user "agentsaga"')

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104


def error_response(refusal: Refusal) -> bytes:
    """An ErrorResponse message ('E'): severity, code and message, as a server sends it."""
    fields = b"".join(tag + text.encode() + b"\0" for tag, text in (
        (b"S", "FATAL"), (b"V", "FATAL"), (b"C", refusal.sqlstate), (b"M", refusal.message)))
    fields += b"\0"
    return b"E" + struct.pack("!i", 4 + len(fields)) + fields


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client went away")
        data += chunk
    return data


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        conn: socket.socket = self.request
        refusal: Refusal = self.server.refusal  # type: ignore[attr-defined]
        try:
            while True:  # SSL and GSS encryption requests first, each declined with 'N'
                (length,) = struct.unpack("!i", _read_exactly(conn, 4))
                body = _read_exactly(conn, length - 4)
                (code,) = struct.unpack("!i", body[:4])
                if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                    conn.sendall(b"N")
                    continue
                break  # the startup message: answer it with the refusal
            conn.sendall(error_response(refusal))
        except (ConnectionError, struct.error):
            return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextmanager
def refusing_postgres(refusal: Refusal) -> Iterator[str]:
    """A DSN whose server refuses every connection with `refusal`; stopped on exit."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.refusal = refusal  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"postgresql://agentsaga@127.0.0.1:{server.server_address[1]}/saga"
    finally:
        server.shutdown()
        server.server_close()
