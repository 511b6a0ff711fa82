"""Decisions are written by the operator's database role only (Postgres refuses the sidecar's),
every table has a grant decision for every role, and a sidecar serves a database prepared by
the migration without any DDL right (real Postgres, a real sidecar process, real gRPC)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from agentsaga import step_key
from agentsaga.client import ApprovalRequired
from agentsaga.errors import LogRefused
from agentsaga.saga import pivot
from agentsaga.saga.corrections import correction_key
from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user
from sagatest.ledger_tools import effects
from sagatest.sidecar_fixtures import ROOT, SidecarProcess, start_sidecar

TOOLS = "sagatest.ledger_tools"
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


def agentsaga(*args: str, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentsaga.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, env={**os.environ, **(env or {})})


def test_every_table_has_a_grant_decision_for_every_role(pg: str) -> None:
    with psycopg.connect(pg) as conn:
        assert roles.undecided(conn) == []
        assert set(roles.tables(conn)) >= {"saga_runs", "saga_log", "corrections"}


@pytest.mark.parametrize("statement", [
    "UPDATE saga_runs SET pivot_decision = '{\"planHash\": \"x\", \"decision\": \"Approved\"}'",
    "UPDATE corrections SET approver = 'mallory'",
    "INSERT INTO corrections (run_id, step_idx, tool, audience, rank, state, approver)"
    " VALUES ('r', 0, 't', '{}', 0, 'Approved', 'mallory')",
    "DELETE FROM saga_log",
    "CREATE TABLE sneaky (id int)",
    "ALTER TABLE saga_runs DROP COLUMN pivot_decision",
])
def test_postgres_refuses_a_decision_or_ddl_from_the_sidecar_role(pg: str, statement: str) -> None:
    with psycopg.connect(with_user(pg, roles.SIDECAR)) as conn, pytest.raises(
            psycopg.errors.InsufficientPrivilege):
        conn.execute(statement)


def test_a_forged_approval_in_the_staged_plan_approves_nothing(ledger: str) -> None:
    """The sidecar's role may not rewrite its staged plan (migration 019), so it cannot mark it
    Approved there; and were it written so, the store believes a decision only from the
    operator's column: no commit step is admitted."""
    sidecar = start_sidecar(with_user(ledger, roles.SIDECAR), TOOLS)
    try:
        client = sidecar.client()
        client.begin_run("forged")
        staged = client.reach_pivot("forged", [{"tool": "send_email", "args": EMAIL}])
        forge = ("UPDATE saga_runs SET state = 'committing', pivot = pivot || %s"
                 " WHERE run_id = %s")
        approved = json.dumps({"state": "Approved", "decision": "Approved",
                               "decidedBy": "mallory"})
        with psycopg.connect(with_user(ledger, roles.SIDECAR), autocommit=True) as conn, \
                pytest.raises(psycopg.errors.InsufficientPrivilege, match="cannot be changed"):
            conn.execute(forge, (approved, "forged"))
        with psycopg.connect(ledger, autocommit=True) as conn:  # behind the trigger's back
            conn.execute("SET session_replication_role = replica")
            conn.execute(forge, (approved, "forged"))
        with pytest.raises(ApprovalRequired):
            client.dispatch("forged", "send_email", EMAIL)
        assert effects(ledger, "email") == []
        with SagaLog(with_user(ledger, roles.SIDECAR), min_size=1, max_size=1).open(
                migrate=False) as as_sidecar, pytest.raises(LogRefused, match="permission"):
            pivot.record_decision(as_sidecar, "forged", staged.plan_hash, "Approved", "mallory")
        refused = agentsaga("approve", "--dsn", with_user(ledger, roles.SIDECAR), "--run",
                            "forged", "--plan-hash", staged.plan_hash, "--decision", "Approved",
                            "--approver", "mallory")
        assert refused.returncode != 0 and "permission denied" in refused.stderr
    finally:
        sidecar.stop()


def test_the_sidecar_serves_a_migrated_database_without_ddl_and_the_operator_role_approves(
        ledger: str) -> None:
    migrated = agentsaga("migrate", "--dsn", ledger)
    assert migrated.returncode == 0, migrated.stderr
    assert "privileges set" in migrated.stdout
    sidecar: SidecarProcess = start_sidecar(with_user(ledger, roles.SIDECAR), TOOLS)
    try:
        client = sidecar.client()
        client.begin_run("least")
        staged = client.reach_pivot("least", [{"tool": "send_email", "args": EMAIL}])
        approved = agentsaga("approve", "--dsn", with_user(ledger, roles.OPERATOR), "--run",
                             "least", "--plan-hash", staged.plan_hash, "--decision",
                             "Approved", "--approver", "alice")
        assert approved.returncode == 0, approved.stderr
        assert client.await_decision("least", timeout=10).state == "Approved"
        client.dispatch("least", "send_email", EMAIL)
        assert len(effects(ledger, "email")) == 1
    finally:
        sidecar.stop()
    with psycopg.connect(ledger) as conn:
        row = conn.execute("SELECT pivot_decision->>'decidedBy', pivot->>'state' FROM saga_runs"
                           " WHERE run_id = 'least'").fetchone()
    assert row == ("alice", "AwaitingApproval")  # the decision is the operator's column


def test_a_persons_commands_decide_as_the_operators_role_and_send_as_the_sidecars(
        ledger: str) -> None:
    """With a credential per role and no --dsn (as in a cluster): `agentsaga settle` and a
    correction's approval are recorded through AGENTSAGA_OPERATOR_DSN (the only role that may),
    the approved correction is sent through AGENTSAGA_DSN (the operator's role may not send)."""
    run = "split"
    with psycopg.connect(ledger) as conn:
        conn.execute("INSERT INTO saga_runs (run_id) VALUES (%s)", (run,))
        for idx, status in enumerate(("UNKNOWN", "CONFIRMED")):
            conn.execute(
                "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key,"
                " args, status, writer_epoch) VALUES (%s, %s, 'send_email', 'irreversible',"
                " %s, '{}', %s, 1)", (run, idx, step_key(run, idx, "send_email"), status))
        conn.execute("INSERT INTO step_settlements (run_id, step_idx, step_key) VALUES"
                     " (%s, 0, %s)", (run, step_key(run, 0, "send_email")))
        conn.execute(
            "INSERT INTO corrections (run_id, step_idx, tool, audience, rank, state, correction)"
            " VALUES (%s, 1, 'send_email', '{customer}', 1, 'Proposed', %s)",
            (run, json.dumps({"tool": "send_correction",
                              "args": {"to": "customer@example.com", "body": "sorry"}})))
    env = {"AGENTSAGA_DSN": with_user(ledger, roles.SIDECAR),
           "AGENTSAGA_OPERATOR_DSN": with_user(ledger, roles.OPERATOR)}
    settled = agentsaga("settle", "--run", run, "--step", "0", "--not-happened", "--reason",
                        "bounced", "--settler", "alice", env=env)
    assert settled.returncode == 0, settled.stderr
    sent = agentsaga("corrections", "--run", run, "--approve", "1", "--approver", "bob",
                     "--send", "--tools", TOOLS, env=env)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    with psycopg.connect(ledger) as conn:
        assert conn.execute("SELECT status FROM saga_log WHERE run_id = %s ORDER BY step_idx",
                            (run,)).fetchall() == [("NOT_EXECUTED",), ("CONFIRMED",)]
        assert conn.execute("SELECT state, outcome, settler FROM step_settlements WHERE"
                            " run_id = %s", (run,)).fetchall() == [
            ("Settled", "NotHappened", "alice")]
        assert conn.execute("SELECT state, approver FROM corrections WHERE run_id = %s",
                            (run,)).fetchall() == [("Sent", "bob")]
    assert [e["key"] for e in effects(ledger, "correction")] == [
        correction_key(run, 1, "send_correction")]


def test_a_sidecar_on_a_database_without_the_schema_says_to_migrate(pg_server: str) -> None:
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS unmigrated")
        conn.execute("CREATE DATABASE unmigrated")
    params = psycopg.conninfo.conninfo_to_dict(pg_server)
    params["dbname"] = "unmigrated"
    with pytest.raises(RuntimeError, match="agentsaga migrate"):
        start_sidecar(psycopg.conninfo.make_conninfo(**params), TOOLS)  # type: ignore[arg-type]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute("DROP DATABASE unmigrated WITH (FORCE)")
