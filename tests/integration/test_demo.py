"""`agentsaga demo --json` as a subprocess: the numbers come from the world's ground truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_demo_agentsaga_is_exactly_right_and_naive_reproduces_the_essay(tmp_path: Path,
                                                                        pg: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "demo", "--json", "--dsn", pg],
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
