"""The stage of a framework run: the world with the essay's faults, the world's MCP server as
the sidecar's declared upstream, a real sidecar process serving gRPC and MCP; afterwards the
unwind (the sidecar's Unwind RPC) and the ground truth."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agentsaga import subprocesses
from agentsaga.client import SagaClient
from agentsaga_lab.demo.database import demo_database
from agentsaga_lab.demo.world import arm
from agentsaga_lab.demo.world_mcp import WorldMCP, write_upstreams
from agentsaga_lab.world import Fault, World

LISTENING = re.compile(r"listening on (\S+)")
SERVING_MCP = re.compile(r"serving MCP at (\S+)")
RECHECK_PAUSE_S = "0.2"


@dataclass
class Stage:
    world: World
    grpc_address: str
    mcp_url: str


def arm_framework(world: World) -> None:
    """The plain demo's faults (Jira 504 after creating the ticket, reships refused), and the
    charge's answer lost on the way back (where the plain demo's worker dies)."""
    arm(world)
    world.faults.add(Fault("POST", "/v1/payment_intents", "commit_then_reset", on_call=1))


@contextmanager
def stage(dsn: str | None = None) -> Iterator[Stage]:
    with tempfile.TemporaryDirectory(prefix="agentsaga-demo-") as tmp, World() as world, \
            WorldMCP(world.url) as upstream, demo_database(dsn, Path(tmp)) as migrated:
        arm_framework(world)
        upstreams = write_upstreams(upstream.url, Path(tmp) / "upstreams.yaml")
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentsaga.cli", "sidecar", "--listen", "127.0.0.1:0",
             "--dsn", migrated, "--mcp-listen", "127.0.0.1:0", "--mcp-upstreams", str(upstreams)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
            env={**os.environ, "AGENTSAGA_RECHECK_PAUSE_S": RECHECK_PAUSE_S})
        try:
            address, url = _wait_serving(proc)
            yield Stage(world, address, url)
        finally:
            subprocesses.stop(proc)


def _wait_serving(proc: subprocess.Popen[str]) -> tuple[str, str]:
    assert proc.stdout is not None
    seen: list[str] = []
    address = ""
    for line in proc.stdout:
        seen.append(line)
        if match := LISTENING.search(line):
            address = match.group(1)
        if match := SERVING_MCP.search(line):
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return address, match.group(1)
    proc.wait()
    raise RuntimeError("the sidecar exited before serving MCP:\n" + "".join(seen))


def _drain(stream: object) -> None:
    """Keep reading the sidecar's output, or a full pipe would block it."""
    for _ in stream:  # type: ignore[attr-defined]
        pass


def unwind(address: str, run_id: str) -> dict[str, object]:
    with SagaClient(address, timeout=60) as client:
        return client.unwind(run_id).report


