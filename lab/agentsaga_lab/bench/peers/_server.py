"""What the peer drivers share: a free port, and a server process that dies with the driver
and is stopped (SIGTERM, then SIGKILL) as a whole process group. The drivers run by path in the
peers' own venv, so this sibling module is importable from them without agentsaga."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
from typing import Any


def die_with_parent() -> None:
    """In the server's child: killed with this script even if it is killed (no orphans)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_group(server: subprocess.Popen[Any]) -> None:
    """SIGTERM the server's process group, SIGKILL it if it is still there after 10 s."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
