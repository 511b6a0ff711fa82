"""A real sidecar process (`agentsaga sidecar`) on a random port, and clients for it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentsaga import subprocesses
from agentsaga.client import SagaClient

ROOT = Path(__file__).resolve().parents[3]  # tests/support/sagatest/ -> the repository
LISTENING = re.compile(r"listening on (\S+)")


@dataclass
class SidecarProcess:
    proc: subprocess.Popen[str]
    address: str
    clients: list[SagaClient] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    """What it printed, from its start."""
    _reader: threading.Thread | None = None

    def wait_for_output(self, text: str, timeout: float = 20.0) -> str:
        """Until the sidecar printed a line containing `text`; returns that line. Fails after
        `timeout` seconds with what it printed."""
        if self._reader is None:
            assert self.proc.stdout is not None
            stdout = self.proc.stdout
            self._reader = threading.Thread(target=lambda: self.lines.extend(stdout),
                                            daemon=True)
            self._reader.start()
        deadline = time.monotonic() + timeout
        while not (found := [line for line in list(self.lines) if text in line]):
            assert time.monotonic() < deadline, (
                f"the sidecar never printed {text!r}:\n" + "".join(self.lines)[-3000:])
            time.sleep(0.02)
        return found[0]

    def client(self) -> SagaClient:
        client = SagaClient(self.address, timeout=30)
        self.clients.append(client)
        return client

    def kill(self) -> int:
        """SIGKILL, as an evicted pod's container gets; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=10)

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        subprocesses.stop(self.proc)
        if self.proc.stdout:
            self.proc.stdout.close()


def start_sidecar(dsn: str, tools: str, *, listen: str = "127.0.0.1:0",
                  env: dict[str, str] | None = None) -> SidecarProcess:
    # `sagatest.*` tool modules are importable through PYTHONPATH=tests/support (set for every
    # process the tests start, in tests/conftest.py); the repository root is never on sys.path.
    full_env = {**os.environ, "AGENTSAGA_RECHECK_PAUSE_S": "0.05", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsaga.cli", "sidecar", "--tools", tools, "--listen", listen,
         "--dsn", dsn],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env, cwd=ROOT,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        match = LISTENING.search(line)
        if match:
            return SidecarProcess(proc, match.group(1), lines=seen)
    proc.wait()
    raise RuntimeError("sidecar exited before listening:\n" + "".join(seen))


@pytest.fixture
def sidecar_factory() -> Iterator[Callable[..., SidecarProcess]]:
    started: list[SidecarProcess] = []

    def factory(dsn: str, tools: str, **kwargs: object) -> SidecarProcess:
        process = start_sidecar(dsn, tools, **kwargs)  # type: ignore[arg-type]
        started.append(process)
        return process

    yield factory
    for process in started:
        process.stop()
