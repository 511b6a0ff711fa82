"""Planted card numbers and secrets never reach the saga log or what GetRun shows, while the
tool receives them whole and an approved step still matches exactly; the staged plan shows its
commit steps' arguments whole to the approver, card numbers masked and nothing else (R10) (real
sidecar process, gRPC, Postgres)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import psycopg

from agentsaga.store import roles
from agentsaga.store.connections import with_user
from sagatest.ledger_tools import effects
from sagatest.otlp_collector import Collector, otel_env
from sagatest.planted_secrets import (
    SECRETS,
    every_row,
    leaks,
    plan_leaks,
    planted_text,
    span_text,
)
from sagatest.sidecar_fixtures import ROOT, SidecarProcess

TOOLS = "sagatest.ledger_tools"
Factory = Callable[..., SidecarProcess]


def test_planted_secrets_never_reach_the_log_or_the_plan(sidecar_factory: Factory,
                                                         ledger: str) -> None:
    client = sidecar_factory(with_user(ledger, roles.SIDECAR), TOOLS).client()
    client.begin_run("planted")
    body = planted_text()
    client.dispatch("planted", "create_ticket", {"summary": body, "order_id": "1182"})
    staged = client.reach_pivot("planted", [{"tool": "send_email",
                                             "args": {"to": "c@example.com", "body": body}}])
    tickets = effects(ledger, "ticket")
    assert tickets and "hunter2" in str(tickets[0])  # the tool got the real values
    with psycopg.connect(ledger) as conn:
        stored = "\n".join(" ".join(map(str, row)) for row in conn.execute(
            "SELECT l.args::text, l.result::text FROM saga_log l").fetchall())
        [(plan,)] = conn.execute("SELECT pivot::text FROM saga_runs").fetchall()
    assert leaks(stored) == [] and leaks(client.get_run("planted").steps[0].args_json) == []
    assert "[card ****4242]" in stored and "[redacted]" in stored
    # the approver reads the email as it will be sent: every secret it carries, no card number
    assert plan_leaks(plan) == plan_leaks(staged.pivot_json) == list(SECRETS)
    assert "[card ****4242 #" in plan and "[redacted]" not in plan  # with its keyed digest
    approved = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "approve", "--dsn",
         with_user(ledger, roles.OPERATOR), "--run", "planted", "--plan-hash", staged.plan_hash,
         "--decision", "Approved", "--approver", "alice"],
        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert approved.returncode == 0, approved.stderr
    client.dispatch("planted", "send_email", {"to": "c@example.com", "body": body})


def test_planted_secrets_never_reach_any_table_or_an_exported_span(
        sidecar_factory: Factory, ledger: str, collector: tuple[Collector, int]) -> None:
    """Arguments and results of a reversible step, a staged plan and an approved commit step,
    with the dispatch spans carrying payloads (AGENTSAGA_TRACE_PAYLOADS), exported over OTLP
    to a collector: the tools get the real values; no table and no span holds one of them."""
    received, port = collector
    env = {**otel_env(port), "AGENTSAGA_TRACE_PAYLOADS": "true"}
    client = sidecar_factory(with_user(ledger, roles.SIDECAR), TOOLS, env=env).client()
    body = planted_text()
    client.begin_run("planted-otlp")
    client.dispatch("planted-otlp", "create_ticket", {"summary": body, "order_id": "1182"})
    staged = client.reach_pivot("planted-otlp", [
        {"tool": "send_email", "args": {"to": "c@example.com", "body": body}}])
    approved = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "approve", "--dsn",
         with_user(ledger, roles.OPERATOR), "--run", "planted-otlp", "--plan-hash",
         staged.plan_hash, "--decision", "Approved", "--approver", "alice"],
        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert approved.returncode == 0, approved.stderr
    client.dispatch("planted-otlp", "send_email", {"to": "c@example.com", "body": body})
    client.end_run("planted-otlp")

    # the real values reached the tools (and their results echo them back)
    assert [e["body"]["body"] for e in effects(ledger, "email")] == [body]
    # up to the run's last span (EndRun's): the leak check reads every span the run exported
    spans = received.wait_for(lambda got: {"execute_tool create_ticket", "execute_tool send_email",
                                           "/agentsaga.v1.Sidecar/EndRun"}
                              <= {s.name for _, s in got})
    exported = "\n".join(span_text(span) for _, span in spans)
    assert "[card ****4242]" in exported  # the payloads were exported, masked
    rows = every_row(ledger, plans=False)
    assert "[card ****4242]" in rows["public.saga_log"] and "[redacted]" in rows["public.saga_log"]
    assert leaks(exported) == [], "in an exported span"
    for table, text in rows.items():
        assert leaks(text) == [], f"in table {table}"
    assert plan_leaks(every_row(ledger)["public.saga_runs"]) == list(SECRETS)
