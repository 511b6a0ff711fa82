"""Planted card numbers and secrets never reach the saga log, the staged plan or what GetRun
shows, while the tool receives them whole and an approved step still matches exactly (real
sidecar process, gRPC, Postgres)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import psycopg

from agentsaga.store import roles
from agentsaga.store.connections import with_user
from sagatest.ledger_tools import effects
from sagatest.otlp_collector import Collector, otel_env
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
LUHN_SPACED = {"spaces": "3782 822463 10005", "dashes": "6011-1111-1111-1117",
               "together": "4111111111111111"}
"""Luhn-valid numbers of other networks and layouts (Amex 4-6-5, Discover, Visa)."""
LUHN_NEEDLES = ["822463", "6011-1111", "4111111111111111"]


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


SAGA_TABLES = """
SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
 WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')
   AND table_name NOT LIKE 'ledger%' ORDER BY 1"""
"""Every table of the database but the test tools' own ground truth (`ledger*`)."""


def _every_row(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        tables = [str(name) for (name,) in conn.execute(SAGA_TABLES).fetchall()]
        return {table: "\n".join(str(row) for (row,) in conn.execute(
            f"SELECT t::text FROM {table} t").fetchall()) for table in tables}  # noqa: S608


def _span_text(span: Any) -> str:
    """Everything a span carries that a backend would store: name, status, attributes, events."""
    parts = [span.name, span.status.message]
    parts += [f"{a.key}={a.value}" for a in span.attributes]
    for event in span.events:
        parts += [event.name] + [f"{a.key}={a.value}" for a in event.attributes]
    return "\n".join(parts)


def test_planted_secrets_never_reach_any_table_or_an_exported_span(
        sidecar_factory: Factory, ledger: str, collector: tuple[Collector, int]) -> None:
    """Arguments and results of a reversible step, a staged plan and an approved commit step,
    with the dispatch spans carrying payloads (AGENTSAGA_TRACE_PAYLOADS), exported over OTLP
    to a collector: the tools get the real values; no table and no span holds one of them."""
    received, port = collector
    env = {**otel_env(port), "AGENTSAGA_TRACE_PAYLOADS": "true"}
    client = sidecar_factory(with_user(ledger, roles.SIDECAR), TOOLS, env=env).client()
    body = " ".join(f"{k}: {v}" for k, v in {**PLANTED, **LUHN_SPACED}.items())
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
    spans = received.wait_for(lambda got: {"execute_tool create_ticket",
                                           "execute_tool send_email"} <= {s.name for _, s in got})
    exported = "\n".join(_span_text(span) for _, span in spans)
    assert "[card ****4242]" in exported  # the payloads were exported, masked
    rows = _every_row(ledger)
    assert "[card ****4242]" in rows["public.saga_log"] and "[redacted]" in rows["public.saga_runs"]
    for needle in NEEDLES + LUHN_NEEDLES:
        assert needle not in exported, f"{needle!r} in an exported span"
        for table, text in rows.items():
            assert needle not in text, f"{needle!r} in table {table}"
