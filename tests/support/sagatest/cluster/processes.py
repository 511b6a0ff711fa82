"""The control plane's components as child processes that cannot outlive the tests.

Each component writes to its own log file (the tail goes into the error when it fails), is
stopped with SIGTERM and then SIGKILL, and is also killed when the test process exits: by an
atexit hook for an ordinary exit and, on Linux, by the kernel (PR_SET_PDEATHSIG) when the test
process is killed outright — an etcd or API server left behind would hold its ports and memory
on a shared machine.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import signal
import socket
import subprocess
import sys
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

_LIVE: weakref.WeakSet[Component] = weakref.WeakSet()


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the component binds it soon after; a
    collision shows as a component that fails to start, with the reason in its log)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    libc = ctypes.CDLL(libc_name, use_errno=True)
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)

    return preexec


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ComponentFailed(RuntimeError):
    """A component exited, or did not become ready in time; the message carries its log's tail."""


class Component:
    """One running component (etcd, kube-apiserver, ...) of the control plane."""

    def __init__(self, name: str, command: Sequence[str], log: Path) -> None:
        self.name = name
        self.command = list(command)
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self._process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent())  # a single prctl: safe after fork
        _LIVE.add(self)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def check(self) -> None:
        """Raise if the component has exited."""
        if self._process is not None and self._process.poll() is not None:
            raise self.failure(f"exited with status {self._process.returncode}")

    def failure(self, what: str) -> ComponentFailed:
        return ComponentFailed(f"{self.name} {what}; the end of {self.log}:\n{tail(self.log)}")

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds (at once if `grace` is 0, as a crash).
        The grace is short on purpose: a terminated API server stops listening at once but
        then waits for its open watches for many seconds, which no test needs to sit through."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            if grace > 0:
                process.terminate()
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _LIVE.discard(self)


@atexit.register
def _stop_all() -> None:
    for component in list(_LIVE):
        component.stop(grace=2.0)
