"""`agentsaga demo --json` as a subprocess: the numbers come from the world's ground truth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo


@pytest.fixture
def empty_db(pg_server: str) -> Iterator[str]:
    """A database with no saga log in it, as `make demo` meets its new embedded Postgres."""
    name = f"demo_empty_{os.getpid()}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    yield make_conninfo(**{**conninfo_to_dict(pg_server), "dbname": name})  # type: ignore[arg-type]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_demo_agentsaga_is_exactly_right_and_naive_reproduces_the_essay(
        tmp_path: Path, empty_db: str) -> None:
    """On a database with no schema yet: the demo prepares it as a release's migration does
    (its sidecars, like every sidecar, never migrate)."""
    done = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "demo", "--json", "--dsn", empty_db],
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
