"""One container of a pod on the test node: a local process (its output appended to the pod's
log file for that container) or a simulated one, and the containerStatus a kubelet reports
for it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sagatest.cluster.processes import _die_with_parent

Obj = dict[str, Any]
# a kubelet backs off 10 s doubling to 5 min between restarts; a test has not that long
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 5.0


def now() -> str:
    """An RFC 3339 timestamp in whole seconds, as the API stores them."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Container:
    """A container's run so far. `restart_policy` is the container's own: Always for a native
    sidecar, OnFailure for a regular init container (Never if the pod's is), else the pod's."""

    spec: Obj
    restart_policy: str
    pod_uid: str
    log: Path
    init: bool = False
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    simulated: bool = False
    restart_count: int = 0
    started_at: str = ""
    finished_at: str = ""
    exit_code: int | None = None
    last_terminated: Obj | None = None
    next_start: float = 0.0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def sidecar(self) -> bool:
        return self.init and self.spec.get("restartPolicy") == "Always"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def _container_id(self) -> str:
        return f"agentsaga-test://{self.pod_uid}-{self.name}-{self.restart_count}"

    def start(self, argv: Sequence[str] | None, env: Mapping[str, str], cwd: Path) -> None:
        """Start the process (`argv`), or simulate the container when `argv` is None."""
        if self.state == "terminated":
            self.last_terminated = self._terminated()
            self.restart_count += 1
        self.started_at, self.finished_at, self.exit_code = now(), "", None
        self.state, self.reason, self.message = "running", "", ""
        if argv is None:
            self.simulated = True
            return
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            # its own session: SIGTERM reaches the whole process group, as in a container
            self.process = subprocess.Popen(
                list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent())

    def fail_to_start(self, reason: str, message: str) -> None:
        """Stay waiting with a reason (CreateContainerConfigError, ...), as a kubelet shows."""
        self.reason, self.message = reason, message

    def poll(self) -> bool:
        """Note the process's exit; True when it has just exited."""
        if self.state != "running" or self.process is None:
            return False
        code = self.process.poll()
        if code is None:
            return False
        self._exited(128 - code if code < 0 else code)
        return True

    def _exited(self, code: int) -> None:
        self.state, self.exit_code, self.finished_at = "terminated", code, now()
        self.reason = "Completed" if code == 0 else "Error"
        self.process = None
        backoff = min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** self.restart_count)
        self.next_start = time.monotonic() + backoff

    def signal(self, number: int) -> None:
        """Send a signal to the process group; a simulated container ends at SIGTERM as a
        process that honours it would (exit 143)."""
        if self.state != "running":
            return
        if self.process is None:
            self._exited(128 + signal.SIGTERM)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, number)

    def should_restart(self) -> bool:
        """Whether a terminated container runs again under its restart policy."""
        if self.state != "terminated":
            return False
        if self.restart_policy == "Always":
            return True
        return self.restart_policy == "OnFailure" and self.exit_code != 0

    def _terminated(self) -> Obj:
        return {"terminated": {"exitCode": self.exit_code, "reason": self.reason,
                               "startedAt": self.started_at, "finishedAt": self.finished_at,
                               "containerID": self._container_id()}}

    def status(self) -> Obj:
        """The containerStatus entry."""
        if self.state == "running":
            state: Obj = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = self._terminated()
        else:
            state = {"waiting": {"reason": self.reason,
                                 **({"message": self.message} if self.message else {})}}
        running = self.state == "running"
        status: Obj = {
            "name": self.name, "image": self.spec.get("image", ""),
            "imageID": "", "ready": running, "started": running,
            "restartCount": self.restart_count, "state": state,
            "lastState": self.last_terminated or {},
        }
        if self.state != "waiting" or self.restart_count:
            status["containerID"] = self._container_id()
        return status
