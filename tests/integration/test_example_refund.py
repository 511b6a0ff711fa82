"""examples/refund runs end to end as its README says: every command block of the README typed
into one shell exactly as written (the world, the sidecar with `--tools ./refund_tools.py`, the
agent loop to the pivot, `agentsaga approve`, `agentsaga log`, the fault of "things to try",
`kill %1 %2`); and, with the pieces started by the test, the rejected plan's unwind. The
outcome is read from the world's ground truth."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from agentsaga import subprocesses
from agentsaga.cli.commands import rejected_next
from agentsaga_lab.world import World
from sagatest.cli_tools import agentsaga
from sagatest.doc_blocks import Shell, blocks, commands
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


WORLD_URL = "http://127.0.0.1:8470"  # where the README's `agentsaga world --port 8470` serves


def world_serves(_: str) -> bool:
    try:
        return httpx.get(f"{WORLD_URL}/_world/truth", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def plan_hash(run_id: str) -> re.Pattern[str]:
    return re.compile(rf"--run {run_id} --plan-hash ([0-9a-f]{{64}})")


def ready(command: str) -> tuple[str, Callable[[str], object]]:
    """What shows that a command the README starts with `&` is up (the next block needs it)."""
    if command.startswith("agentsaga world"):
        return "the world serving", world_serves
    if command.startswith("agentsaga sidecar"):
        return "the sidecar listening", lambda out: "agentsaga sidecar listening on" in out
    agent = re.match(r"python agent\.py (\S+)", command)
    if agent:
        return f"{agent.group(1)}'s plan hash", plan_hash(agent.group(1)).search
    raise AssertionError(f"the README starts {command!r} in the background: say here what "
                         "shows it is ready")


def test_every_command_block_of_the_readme_runs_as_written(pg: str, tmp_path: Path) -> None:
    """The blocks in order, in one shell started at the repository root (where the README says
    to begin): `HASH` is the one word replaced, by the hash the agent of that run printed. The
    saga log is the test's database (AGENTSAGA_DSN) instead of the per-user embedded one."""
    assert (ROOT / ".venv" / "bin" / "activate").exists(), "make test creates .venv"
    assert not world_serves(""), f"something already serves {WORLD_URL}"
    found = blocks(README)
    assert len(found) >= 6 and all(kind == "sh" for kind, _ in found)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "AGENTSAGA_ADDRESS",
                                                            "EXAMPLE_WORLD_URL")}
    shell = Shell(ROOT, {**env, "AGENTSAGA_DSN": pg, "EXAMPLE_APPROVAL_TIMEOUT_S": "120"},
                  tmp_path / "shell.log")
    try:
        for _, block in found:
            run = re.search(r"--run (\S+) --plan-hash HASH", block)
            run_id = run.group(1) if run else ""
            if run_id:
                hashes = plan_hash(run_id).findall(shell.output())
                assert hashes, f"no plan hash printed for {run_id}"
                block = block.replace("HASH", hashes[-1])
            shell.run(block)
            for command in commands(block):
                if command.split("#")[0].rstrip().endswith("&"):
                    what, seen = ready(command)
                    shell.wait_for(seen, what)
            if run_id:
                shell.wait_for(re.compile(f"run {run_id} succeeded").search,
                               f"the end of {run_id}")
            if "kill %1 %2" in block:
                break
            if world_serves(""):  # the world as it stood before `kill %1 %2`
                truth = httpx.get(f"{WORLD_URL}/_world/truth", timeout=5).json()
        else:
            raise AssertionError("the README never stops the world and the sidecar")
        shell.wait_for(lambda _: not world_serves(""), "the world stopped by kill %1 %2", 30)
    finally:
        code = shell.close()
    output = shell.output()
    assert code == 0, output
    assert "Traceback" not in output, output
    # refund-2 met the fault: OUTCOME UNKNOWN, called again, the hold found by its key
    assert "charge_fee: OUTCOME UNKNOWN; calling it again" in output, output
    assert [(p["amount"], p["status"]) for p in truth["payment_intents"]] == [
        (500, "requires_capture")] * 2, truth
    assert len({p["metadata"]["saga_key"] for p in truth["payment_intents"]}) == 2
    assert [e["to"] for e in truth["emails"]] == [["dana@example.com"]] * 2
    assert re.search(r"charge_fee\s+compensatable\s+CONFIRMED", output)
    assert re.search(r"send_receipt\s+irreversible\s+CONFIRMED", output)


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


SUGGESTED = re.compile(r"unwind it with `([^`]+)`")


def test_the_unwind_a_rejection_suggests_runs_where_no_agent_is_left(
        world: World, pg: str, example_sidecar: str) -> None:
    """The agent stopped at the pivot: the rejection's own suggestion, typed as printed (with
    the sidecar's tools named as AGENTSAGA_TOOLS, as in a shell that runs it), releases the
    hold; without them, it says to name them."""
    agent, plan_hash = run_agent_to_the_pivot(example_sidecar, "refund-3")
    agent.kill()
    finish(agent)
    env = {"AGENTSAGA_TOOLS": "./refund_tools.py", "EXAMPLE_WORLD_URL": world.url}
    rejected = agentsaga("approve", "--run", "refund-3", "--plan-hash", plan_hash,
                         "--decision", "rejected", "--dsn", pg, cwd=EXAMPLE, env=env)
    assert rejected.returncode == 0, rejected.stderr
    found = SUGGESTED.search(rejected.stdout)
    assert found, rejected.stdout
    words = shlex.split(found.group(1))
    assert words[:2] == ["agentsaga", "unwind"]
    unwound = agentsaga(*words[1:], cwd=EXAMPLE, env=env)
    assert unwound.returncode == 0, unwound.stdout + unwound.stderr
    assert [p["status"] for p in world.truth()["payment_intents"]] == ["canceled"]
    assert world.truth()["emails"] == []
    # without AGENTSAGA_TOOLS the same suggestion asks for them (the default tools cannot
    # look the example's steps up)
    assert rejected_next("refund-3", None, ()) == (
        "the run will not commit: an agent waiting at the pivot unwinds it itself; with none "
        "left, unwind it with `agentsaga unwind --run refund-3 --tools MODULE`, MODULE being "
        "the tools your sidecar loaded (its --tools or AGENTSAGA_TOOLS, e.g. ./refund_tools.py)")
