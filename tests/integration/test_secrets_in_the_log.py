"""Planted card numbers and secrets never reach the saga log, the staged plan or what GetRun
shows, while the tool receives them whole and an approved step still matches exactly (real
sidecar process, gRPC, Postgres)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import psycopg

from agentsaga.store import roles
from agentsaga.store.connections import with_user
from sagatest.ledger_tools import effects
from sagatest.sidecar_fixtures import ROOT, SidecarProcess

TOOLS = "sagatest.ledger_tools"
Factory = Callable[..., SidecarProcess]

PLANTED = {
    "dots": "4242.4242.4242.4242", "slashes": "5555/5555/5555/4444",
    "nbsp": "4000\u00a00566\u00a05566\u00a05556",
    "full_width": "\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12"
                  "\uff14\uff12\uff14\uff12",
    "stripe": "sk_live_51HxYzAbCdEfGhIjKlMnOp", "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.abc.def",
    "password": "password=hunter2", "pem": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n"
                                          "-----END PRIVATE KEY-----",
}
NEEDLES = ["4242.4242", "5555/5555", "0566\u00a05566", "\uff14\uff12\uff14\uff12",
           "sk_live_51H", "eyJhbGciOiJIUzI1NiJ9", "hunter2", "MIIEvQIBADANBg"]


def test_planted_secrets_never_reach_the_log_or_the_plan(sidecar_factory: Factory,
                                                         ledger: str) -> None:
    client = sidecar_factory(with_user(ledger, roles.SIDECAR), TOOLS).client()
    client.begin_run("planted")
    body = " ".join(f"{k}: {v}" for k, v in PLANTED.items())
    client.dispatch("planted", "create_ticket", {"summary": body, "order_id": "1182"})
    staged = client.reach_pivot("planted", [{"tool": "send_email",
                                             "args": {"to": "c@example.com", "body": body}}])
    tickets = effects(ledger, "ticket")
    assert tickets and "hunter2" in str(tickets[0])  # the tool got the real values
    with psycopg.connect(ledger) as conn:
        stored = str(conn.execute("SELECT r.pivot::text, l.args::text, l.result::text"
                                  " FROM saga_runs r JOIN saga_log l USING (run_id)").fetchall())
    shown = client.get_run("planted").steps[0].args_json + staged.pivot_json
    for needle in NEEDLES:
        assert needle not in stored and needle not in shown, needle
    assert "[card ****4242]" in stored and "[redacted]" in stored
    approved = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "approve", "--dsn",
         with_user(ledger, roles.OPERATOR), "--run", "planted", "--plan-hash", staged.plan_hash,
         "--decision", "Approved", "--approver", "alice"],
        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert approved.returncode == 0, approved.stderr
    client.dispatch("planted", "send_email", {"to": "c@example.com", "body": body})
