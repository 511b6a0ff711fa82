"""`agentsaga demo --json` as a subprocess, the plain one and the framework ones, on an empty
database and on the embedded default: the numbers come from the world's ground truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentsaga_lab.demo.report import EXPECTED_AGENTSAGA


def test_demo_agentsaga_is_exactly_right_and_naive_reproduces_the_essay(
        tmp_path: Path, pg_empty: str) -> None:
    """On a database with no schema yet: the demo prepares it as a release's migration does
    (its sidecars, like every sidecar, never migrate)."""
    done = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "demo", "--json", "--dsn", pg_empty],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    out = json.loads(done.stdout)
    assert out["agentsaga"] == {"tickets_created": 1, "tickets_open": 0, "ghost_closes": 0,
                                "charges": 1, "charges_unrefunded": 0, "refunds": 1,
                                "customer_emails": 0}
    assert out["naive"] == {"tickets_created": 2, "tickets_open": 1, "ghost_closes": 1,
                            "charges": 2, "charges_unrefunded": 1, "refunds": 1,
                            "customer_emails": 1}
    log = {s["tool"]: s for s in out["agentsaga_log"]}
    assert log["create_ticket"]["status"] == "COMPENSATED"
    assert log["charge_card"]["status"] == "COMPENSATED"
    assert log["charge_card"]["audience"] == ["finance"]
    assert log["reship"]["status"] == "FAILED"
    assert [c["state"] for c in out["agentsaga_unwind"]["corrections"]] == ["Silent", "Silent"]


@pytest.mark.parametrize("agent", ["openai-agents", "langgraph"])
@pytest.mark.parametrize("database", ["--dsn", "embedded"])
def test_framework_demos_end_in_the_plain_demos_ground_truth(
        agent: str, database: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """With --dsn naming an empty database, and without (a throw-away embedded Postgres), as a
    user types them on a fresh clone."""
    dsn = ["--dsn", request.getfixturevalue("pg_empty")] if database == "--dsn" else []
    done = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "demo", "--agent", agent, "--json", *dsn],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    out = json.loads(done.stdout)
    assert out["agent"] == agent
    assert out["agentsaga"] == EXPECTED_AGENTSAGA
