"""The incident, twice, against one local world with the same faults.

agentsaga's run goes through the real sidecar process over gRPC. The first sidecar has the crash
point `after_call:charge_card` armed: Stripe authorises, then the process is SIGKILLed before the
outcome is written (an eviction). A second sidecar starts on the same database; the agent resumes
from the log (GetRun), not from its transcript, and calls the unsettled step again; the sidecar
finds the charge by key. The warehouse rejects the reship and the run is unwound.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsaga.client import SagaClient, SidecarLost, ToolFailed, ToolOutcomeUnknown
from agentsaga.connectors.tools import register_all
from agentsaga.saga.registry import Registry
from agentsaga.store import SagaLog
from agentsaga_lab.demo import naive
from agentsaga_lab.demo.database import demo_database
from agentsaga_lab.demo.model import CHARGE, PLAN, RESHIP, retry_of
from agentsaga_lab.demo.report import outcome
from agentsaga_lab.demo.world import arm, connector_env
from agentsaga_lab.world import World

LISTENING = re.compile(r"listening on (\S+)")
RECHECK_PAUSE_S = "0.2"


@dataclass
class Result:
    outcome: dict[str, int]
    truth: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    unwind: dict[str, Any] = field(default_factory=dict)


@contextmanager
def sidecar(dsn: str, env: dict[str, str], workdir: Path) -> Iterator[tuple[subprocess.Popen[str],
                                                                             SagaClient]]:
    """`agentsaga sidecar --tools agentsaga.connectors.tools` as a child process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsaga.cli", "sidecar", "--tools",
         "agentsaga.connectors.tools", "--listen", "127.0.0.1:0", "--dsn", dsn],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=workdir)
    assert proc.stdout is not None
    seen: list[str] = []
    address = ""
    for line in proc.stdout:
        seen.append(line)
        match = LISTENING.search(line)
        if match:
            address = match.group(1)
            break
    if not address:
        proc.wait()
        raise RuntimeError("the sidecar exited before listening:\n" + "".join(seen))
    client = SagaClient(address, timeout=30)
    try:
        yield proc, client
    finally:
        client.close()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
        proc.stdout.close()


def run_naive(world: World) -> Result:
    arm(world)
    registry = register_all(Registry(), connector_env(world.url))
    harness = naive.run(registry, world.url)
    truth = world.truth()
    return Result(outcome(truth), truth, notes=harness.actions)


def run_agentsaga(world: World, dsn: str, workdir: Path) -> Result:
    arm(world)
    run_id = f"refund-1182-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, **connector_env(world.url), "AGENTSAGA_RECHECK_PAUSE_S": RECHECK_PAUSE_S}
    env.pop("AGENTSAGA_CRASH_AT", None)
    notes: list[str] = []
    with sidecar(dsn, {**env, "AGENTSAGA_CRASH_AT": f"after_call:{CHARGE.tool}"},
                 workdir) as (proc, client):
        client.begin_run(run_id, agent="support-agent")
        for step in PLAN[:3]:
            try:
                client.dispatch(run_id, step.tool, step.args)
            except SidecarLost:  # before ToolOutcomeUnknown: it is one
                proc.wait(timeout=10)
                notes.append(f"{step.tool}: the pod was evicted right after the call (the "
                             f"sidecar died, exit {proc.returncode}) before its outcome was "
                             "written; its row stays INTENDED")
                break
            except ToolOutcomeUnknown:
                notes.append(f"{step.tool}: outcome unknown (the 504); the model retried in new "
                             "words, but the key comes from the run and the step, not the "
                             "words: the same step, found by its key, no second ticket")
                client.dispatch(run_id, retry_of(step).tool, retry_of(step).args)
    with sidecar(dsn, env, workdir) as (_, client):
        client.begin_run(run_id, agent="support-agent")  # adopts the run: a new epoch (R12)
        newest = client.get_run(run_id).steps[-1]
        if newest.status in ("INTENDED", "UNKNOWN"):  # resume from the log, not the transcript
            client.dispatch(run_id, newest.tool, json.loads(newest.args_json))
            notes.append(f"a new sidecar adopted the run and read the saga log, not the "
                         f"transcript: step {newest.step_idx} {newest.tool} was "
                         f"{newest.status}, found by its key, not charged again")
        try:
            client.dispatch(run_id, RESHIP.tool, RESHIP.args)
        except ToolFailed as exc:
            notes.append(f"{RESHIP.tool}: rejected ({str(exc)[:60]}...); unwinding")
        report = client.unwind(run_id).report
    saga_log = SagaLog(dsn, min_size=1, max_size=2).open()
    try:
        steps = [{"step_idx": s.step_idx, "tool": s.tool, "tool_class": s.tool_class,
                  "status": str(s.status),
                  "comp_status": None if s.comp_status is None else str(s.comp_status),
                  "audience": s.audience,
                  "external_ref": s.external_ref} for s in saga_log.steps(run_id)]
    finally:
        saga_log.close()
    truth = world.truth()
    return Result(outcome(truth), truth, notes=notes, steps=steps, unwind=report)


def run_both(dsn: str | None) -> tuple[Result, Result]:
    with tempfile.TemporaryDirectory(prefix="agentsaga-demo-") as tmp, World() as world, \
            demo_database(dsn, Path(tmp)) as migrated:
        first = run_naive(world)
        second = run_agentsaga(world, migrated, Path(tmp))
    return first, second

