"""docs/local-cluster.md runs as written: every command block of the page typed into one shell
started at the repository root, from `make cluster` to `make cluster-down`, against the real
local cluster it starts (the tests' control plane and real node, the embedded Postgres, the
product's images, the chart, the refund example's agent as a Job). `HASH` is the one word
replaced, by the plan hash `kubectl agentsaga plan` printed, as the page tells its reader.

The outcomes are read from the cluster and the stand-in vendors before the page takes the
cluster down: refund-1 approved by dana and Succeeded, its Job Complete and its receipt sent
once; refund-2's pod evicted at the pivot, the operator's unwind Job Complete, the run Unwound
and its hold canceled; then nothing of the cluster is left. How long each block took is printed
(the note's figures).

The cluster takes the machine-wide node lock: this test and the other real-node tests wait for
each other; a local cluster of the checkout's own (`make cluster`) must not be running.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sagatest.cluster import leftovers
from sagatest.doc_blocks import Shell, blocks
from sagatest.sidecar_fixtures import ROOT

pytestmark = pytest.mark.real_node  # make cluster starts the machine's one node

PAGE = ROOT / "docs" / "local-cluster.md"
STATE = ROOT / ".cluster"
KUBECTL = ROOT / "tools" / "bin" / "kubectl"
PLAN_HASH = re.compile(r"plan hash ([0-9a-f]{64})")
Obj = dict[str, Any]


def _cluster_env() -> dict[str, str]:
    """The variables .cluster/env exports (the page's `. .cluster/env`)."""
    found = {}
    for line in (STATE / "env").read_text().splitlines():
        match = re.match(r"export (\w+)='?([^']*)'?$", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _get(*args: str) -> Obj:
    done = subprocess.run([str(KUBECTL), "--kubeconfig", str(STATE / "kubeconfig"), "get",
                           *args, "-o", "json"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    found: Obj = json.loads(done.stdout)
    return found


def _condition(obj: Obj, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _supervisor_alive() -> bool:
    try:
        pid = int((STATE / "supervisor.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def test_every_command_block_of_the_page_runs_as_written(tmp_path: Path) -> None:
    assert not _supervisor_alive(), (
        f"a local cluster of this checkout runs ({STATE}): `make cluster-down` first")
    found = blocks(PAGE.read_text())
    assert [kind for kind, _ in found] == ["sh"] * len(found)
    assert found[0][1].strip() == "make cluster" and found[-1][1].strip() == "make cluster-down"
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "KUBECONFIG", "AGENTSAGA_DSN", "AGENTSAGA_ADDRESS",
                        "WORLD_URL", "APPROVER_KUBECONFIG")}
    # the cluster outlives `make cluster`, not this test: killed, it takes the cluster with it
    env["AGENTSAGA_CLUSTER_HOLDER"] = str(os.getpid())
    shell = Shell(ROOT, env, tmp_path / "shell.log")
    seconds: list[tuple[str, float]] = []
    facts: Obj = {}
    try:
        for _, block in found:
            if "--plan-hash HASH" in block:
                hashes = PLAN_HASH.findall(shell.output())
                assert hashes, "`kubectl agentsaga plan` printed no plan hash"
                block = block.replace("HASH", hashes[-1])
            if block.strip() == "make cluster-down":
                facts = _outcomes()
            started = time.monotonic()
            # `make cluster` waits for the node lock while other real-node tests run
            shell.run(block, timeout=2400 if block.strip() == "make cluster" else 420)
            seconds.append((block.strip().splitlines()[0][:70], time.monotonic() - started))
    finally:
        code = shell.close()
        if _supervisor_alive() or STATE.exists():  # whatever the page did not take down
            subprocess.run([sys.executable, "-P", str(ROOT / "tools" / "localcluster.py"),
                            "down"], check=False, timeout=300)
    output = shell.output()
    assert code == 0, output
    assert "Traceback" not in output, output
    print("seconds per block:\n" + "\n".join(f"{s:7.1f}  {c}" for c, s in seconds))

    # refund-1: approved by dana, the agent's Job done, the receipt sent once
    runs = facts["runs"]
    assert runs["refund-1"]["status"]["phase"] == "Succeeded", runs["refund-1"]
    assert runs["refund-1"]["status"]["pivot"]["decidedBy"] == "dana"
    assert _condition(facts["jobs"]["refund-1-agent"], "Complete")
    assert "run refund-1 succeeded: the receipt went out once" in output
    truth = facts["truth"]
    assert [e["subject"] for e in truth["emails"]] == ["Your order 1182"], truth["emails"]
    # refund-2: evicted at the pivot, never started again, unwound by the operator's Job
    assert runs["refund-2"]["status"]["phase"] == "Unwound", runs["refund-2"]
    assert runs["refund-2"]["status"]["steps"]["compensated"] == 1  # the hold
    assert _condition(facts["jobs"]["refund-2-agent"], "Failed")
    unwinds = [j for name, j in facts["jobs"].items() if not name.endswith("-agent")]
    assert len(unwinds) == 1 and _condition(unwinds[0], "Complete"), list(facts["jobs"])
    assert unwinds[0]["metadata"]["labels"]["agentsaga.io/run"] == "refund-2"
    holds = sorted(p["status"] for p in truth["payment_intents"])
    assert holds == ["canceled", "requires_capture"], truth["payment_intents"]
    # the saga log, as `agentsaga log` printed it
    assert re.search(r"send_receipt\s+irreversible\s+CONFIRMED", output), output
    assert re.search(r"run refunds/refund-2\s+state=unwound", output), output
    assert re.search(r"charge_fee\s+compensatable\s+COMPENSATED", output), output
    # the page took everything down
    assert not STATE.exists()
    assert not [f for f in leftovers.STATE_DIR.glob("*.json")
                if json.loads(f.read_text()).get("owner") == facts["supervisor"]]


def _outcomes() -> Obj:
    """The AgentRuns, the Jobs and the vendors' truth, just before the page takes the cluster
    down."""
    world = _cluster_env()["WORLD_URL"]
    return {
        "runs": {r["metadata"]["name"]: r
                 for r in _get("agentruns.agentsaga.io", "-n", "refunds")["items"]},
        "jobs": {j["metadata"]["name"]: j for j in _get("jobs", "-n", "refunds")["items"]},
        "truth": httpx.get(f"{world}/_world/truth", timeout=10).json(),
        "supervisor": int((STATE / "supervisor.pid").read_text()),
    }
