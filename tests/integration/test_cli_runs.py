"""The small commands a first user reaches for: `--version`, `runs`, `log --json` with the
pivot, `approve --decision` in any case, one wording for a run that is not there."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from agentsaga.saga import pivot
from agentsaga.saga.registry import Registry
from agentsaga.store import SagaLog
from sagatest.cli_tools import agentsaga


def _staged_run(dsn: str, run_id: str) -> str:
    """A run that reached its pivot; returns the plan hash."""
    registry = Registry()

    @registry.tool(cls="irreversible", audience=["customer"], lookup=lambda key: None)
    def send_email(to: str, body: str, idempotency_key: str) -> dict[str, str]:
        return {"id": idempotency_key}

    with SagaLog(dsn, min_size=1, max_size=2).open() as saga_log:
        epoch = saga_log.begin_run(run_id, agent="refunds").run.owner_epoch
        record = pivot.stage(saga_log, registry, run_id, epoch,
                             [{"tool": "send_email", "args": {"to": "d@example.com",
                                                              "body": "refunded"}}],
                             max_args_bytes=1 << 20)
    return record.plan_hash


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    done = agentsaga("--version", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.strip() == f"agentsaga {metadata.version('agentsaga')}"


def test_runs_lists_runs_newest_first_with_state_and_pivot(pg: str, tmp_path: Path) -> None:
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        saga_log.begin_run("older-run", agent="refunds")
    _staged_run(pg, "newer-run")
    done = agentsaga("runs", "--dsn", pg, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["run", "state", "pivot", "agent", "namespace", "started"]
    assert lines[1].split()[:4] == ["newer-run", "awaiting_approval", "AwaitingApproval",
                                    "refunds"]
    assert lines[2].split()[:4] == ["older-run", "running", "-", "refunds"]
    as_json = json.loads(agentsaga("runs", "--json", "--state", "running", "--dsn", pg,
                                   cwd=tmp_path).stdout)
    assert [r["run_id"] for r in as_json] == ["older-run"]


def test_log_json_carries_the_pivot_and_plan_hash(pg: str, tmp_path: Path) -> None:
    plan_hash = _staged_run(pg, "json-run")
    done = agentsaga("log", "--run", "json-run", "--json", "--dsn", pg, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["plan_hash"] == plan_hash
    assert out["pivot"]["state"] == "AwaitingApproval"
    assert out["pivot"]["commit"][0]["tool"] == "send_email"


def test_approve_takes_the_decision_in_any_case(pg: str, tmp_path: Path) -> None:
    plan_hash = _staged_run(pg, "lower-run")
    helped = agentsaga("approve", "--help", cwd=tmp_path)
    assert "Approved (the commit steps may run) or Rejected" in " ".join(helped.stdout.split())
    done = agentsaga("approve", "--run", "lower-run", "--plan-hash", plan_hash, "--decision",
                     "approved", "--approver", "alice", "--dsn", pg, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        run = saga_log.require_run("lower-run")
    assert run.pivot is not None and run.pivot.decision == "Approved"
    bad = agentsaga("approve", "--run", "lower-run", "--plan-hash", plan_hash, "--decision",
                    "maybe", "--dsn", pg, cwd=tmp_path)
    assert bad.returncode == 2 and "'maybe': use Approved or Rejected" in bad.stderr


def test_a_run_that_is_not_there_is_worded_one_way(pg: str, tmp_path: Path) -> None:
    expected = "run 'ghost' has not begun in this saga log: BeginRun starts a run"
    for args in (["log", "--run", "ghost"],
                 ["approve", "--run", "ghost", "--plan-hash", "h", "--decision", "Approved"],
                 ["corrections", "--run", "ghost", "--approve", "1"]):
        done = agentsaga(*args, "--dsn", pg, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert expected in done.stderr, (args, done.stderr)
