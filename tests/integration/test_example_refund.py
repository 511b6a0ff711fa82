"""examples/refund runs end to end as its README says: the world, the sidecar with
`--tools ./refund_tools.py`, the agent loop to the pivot, `agentsaga approve`, `agentsaga log`;
the outcome read from the world's ground truth."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsaga import subprocesses
from agentsaga.world import World
from sagatest.cli_tools import agentsaga
from sagatest.sidecar_fixtures import ROOT

EXAMPLE = ROOT / "examples" / "refund"
README = (EXAMPLE / "README.md").read_text()
HASH = re.compile(r"--plan-hash ([0-9a-f]{64})")


@pytest.fixture
def example_sidecar(world: World, pg: str) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "agentsaga.cli", "sidecar", "--tools", "./refund_tools.py",
         "--listen", "127.0.0.1:0", "--dsn", pg], cwd=EXAMPLE, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "EXAMPLE_WORLD_URL": world.url})
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "listening on" in line:
            break
    else:
        raise AssertionError("the example's sidecar did not start:\n" + "".join(seen))
    try:
        yield line.split("listening on ")[1].split()[0]
    finally:
        subprocesses.stop(proc)
        proc.stdout.close()


def run_agent_to_the_pivot(address: str, run_id: str) -> tuple[subprocess.Popen[str], str]:
    agent = subprocess.Popen([sys.executable, "agent.py", run_id], cwd=EXAMPLE, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env={**os.environ, "AGENTSAGA_ADDRESS": address,
                                  "EXAMPLE_APPROVAL_TIMEOUT_S": "120"})
    assert agent.stdout is not None
    for line in agent.stdout:
        found = HASH.search(line)
        if found:
            return agent, found.group(1)
    agent.wait(timeout=10)
    raise AssertionError(f"the agent exited ({agent.returncode}) before the pivot")


def finish(agent: subprocess.Popen[str]) -> tuple[int, str]:
    assert agent.stdout is not None
    rest = agent.stdout.read()
    agent.stdout.close()
    return agent.wait(timeout=120), rest


def test_readme_commands_are_the_ones_tested() -> None:
    for command in ("agentsaga sidecar --tools ./refund_tools.py", "python agent.py refund-1",
                    "agentsaga approve --run refund-1 --plan-hash HASH --decision approved",
                    "agentsaga log --run refund-1"):
        assert command in README


def test_example_reaches_the_pivot_and_finishes_after_approval(
        world: World, pg: str, example_sidecar: str, tmp_path: Path) -> None:
    agent, plan_hash = run_agent_to_the_pivot(example_sidecar, "refund-1")
    assert world.truth()["emails"] == []  # nothing reaches the customer before the approval
    approved = agentsaga("approve", "--run", "refund-1", "--plan-hash", plan_hash,
                         "--decision", "approved", "--dsn", pg, cwd=EXAMPLE)
    assert approved.returncode == 0, approved.stderr
    code, output = finish(agent)
    assert code == 0, output
    assert "run refund-1 succeeded" in output
    truth = world.truth()
    assert [e["to"] for e in truth["emails"]] == [["dana@example.com"]]
    assert [(p["amount"], p["status"]) for p in truth["payment_intents"]] == [
        (500, "requires_capture")]
    log = agentsaga("log", "--run", "refund-1", "--dsn", pg, cwd=tmp_path)
    assert log.returncode == 0, log.stderr
    assert "state=succeeded" in log.stdout
    assert re.search(r"charge_fee\s+compensatable\s+CONFIRMED", log.stdout)
    assert re.search(r"send_receipt\s+irreversible\s+CONFIRMED", log.stdout)
    assert "quote_fee" not in log.stdout  # pure tools are not logged


def test_example_unwinds_when_the_plan_is_rejected(world: World, pg: str,
                                                   example_sidecar: str) -> None:
    agent, plan_hash = run_agent_to_the_pivot(example_sidecar, "refund-2")
    rejected = agentsaga("approve", "--run", "refund-2", "--plan-hash", plan_hash,
                         "--decision", "rejected", "--dsn", pg, cwd=EXAMPLE)
    assert rejected.returncode == 0, rejected.stderr
    code, output = finish(agent)
    assert code == 1 and "plan Rejected: unwinding" in output and "unwound" in output
    truth = world.truth()
    assert truth["emails"] == []
    assert [p["status"] for p in truth["payment_intents"]] == ["canceled"]
