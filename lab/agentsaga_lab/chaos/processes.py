"""The processes a campaign runs and kills: sidecars, Jobs (`agentsaga unwind`) and the embedded
Postgres server. Sidecars and Jobs are real subprocesses of `agentsaga`; SIGKILL is SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsaga import subprocesses
from agentsaga.client import SagaClient
from agentsaga.errors import ConfigurationError
from agentsaga.store.postgres import get_server

LISTENING = re.compile(r"listening on (\S+)")


@dataclass
class Output:
    """Everything the campaign's subprocesses printed (scanned for secrets by the tests)."""

    lines: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)

    def text(self) -> str:
        with self.lock:
            return "".join(self.lines)


def _drain(stream: Any, output: Output) -> None:
    for line in stream:
        output.add(line)


@dataclass
class Sidecar:
    name: str
    proc: subprocess.Popen[str]
    address: str
    client: SagaClient

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int:
        """SIGKILL (an evicted pod that does not wait); returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.wait()

    def wait(self, timeout: float = 15.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self.client.close()
        return code

    def stop(self) -> None:
        self.client.close()
        subprocesses.stop(self.proc)


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentsaga.cli", *args]


class Processes:
    """Starts sidecars and Jobs with the campaign's environment; collects their output."""

    def __init__(self, dsn: str, tools: str, env: Mapping[str, str], output: Output) -> None:
        self.dsn = dsn
        self.tools = tools
        self.env = {**os.environ, **env}
        self.env.pop("AGENTSAGA_CRASH_AT", None)
        self.output = output
        self.started: list[Sidecar] = []

    def sidecar(self, name: str, *, crash_at: str = "", pod_uid: str = "") -> Sidecar:
        env = dict(self.env)
        if crash_at:
            env["AGENTSAGA_CRASH_AT"] = crash_at
        if pod_uid:
            env["AGENTSAGA_POD_UID"] = pod_uid
        proc = subprocess.Popen(
            _command("sidecar", "--tools", self.tools, "--listen", "127.0.0.1:0",
                     "--dsn", self.dsn),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        seen: list[str] = []
        for line in proc.stdout:
            seen.append(line)
            self.output.add(line)
            match = LISTENING.search(line)
            if match:
                threading.Thread(target=_drain, args=(proc.stdout, self.output),
                                 daemon=True).start()
                sidecar = Sidecar(name, proc, match.group(1), SagaClient(match.group(1),
                                                                         timeout=30))
                self.started.append(sidecar)
                return sidecar
        proc.wait()
        raise ConfigurationError(f"sidecar {name} exited before listening:\n{''.join(seen)}")

    def job(self, action: str, run_id: str, *, crash_at: str = "") -> subprocess.Popen[str]:
        """`agentsaga unwind|reconcile --run RUN` as a Job would run it."""
        env = dict(self.env)
        if crash_at:
            env["AGENTSAGA_CRASH_AT"] = crash_at
        return subprocess.Popen(
            _command(action, "--run", run_id, "--dsn", self.dsn, "--tools", self.tools,
                     "--owner", f"job-{action}-{run_id}"),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

    def finish_job(self, proc: subprocess.Popen[str], timeout: float = 60.0) -> int:
        out, _ = proc.communicate(timeout=timeout)
        self.output.add(out)
        return proc.returncode

    def stop_all(self) -> None:
        for sidecar in self.started:
            sidecar.stop()


class EmbeddedPostgres:
    """A private Postgres (pgserver) that the campaign may stop hard and start again."""

    def __init__(self, data_dir: Path) -> None:
        self.server: Any = get_server(data_dir, cleanup_mode="stop")
        self.dsn: str = self.server.get_uri()

    def restart(self) -> None:
        """`pg_ctl stop -m immediate` (a crash: no checkpoint, unflushed commits lost), start."""
        from pgserver import _commands

        _commands.pg_ctl(["-w", "-m", "immediate", "stop"],  # type: ignore[attr-defined]
                         pgdata=self.server.pgdata,
                         user=self.server.system_user)
        self.server.ensure_postgres_running()
        if self.server.get_uri() != self.dsn:
            raise ConfigurationError("the embedded Postgres came back on another address")

    def stop(self) -> None:
        self.server.cleanup()
