"""Isolation is Postgres's, not the sidecar's: one agent namespace's credentials (its sidecar's
and its Jobs') cannot read or change another namespace's runs, and even within its namespace
a sidecar cannot rewrite what a step was sent with, what undoes it, who holds the run, or what
a person settled (real Postgres: row-level security, column grants and triggers of
migration 014, roles from `agentsaga.store.roles`). The security review's reproduction, every
attempt refused, every row as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from agentsaga.errors import SagaError
from agentsaga.keys import step_key
from agentsaga.states import CompensationStatus, SettlementOutcome, StepStatus
from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user

A, B = "team-a", "team-b"
VICTIM = f"{B}/refund-7"
PAYOUT = {"tool": "payout", "args": {"account": "ATTACKER-ACCT", "amount": 99999}}
REFUND = {"tool": "refund", "args": {"charge": "ch_1", "amount": 1200}}
CARD = "[card ****4242]"


def _snapshot(dsn: str) -> dict[str, list[str]]:
    """Every row of every run table, as the migration role sees them."""
    with psycopg.connect(dsn) as conn:
        return {table: [json.dumps(r[0], sort_keys=True) for r in conn.execute(
            f"SELECT to_jsonb(t) FROM {table} t ORDER BY 1")]  # noqa: S608 - our table names
            for table in roles.RUN_TABLES}


@pytest.fixture
def two_namespaces(pg: str) -> str:
    """Namespaces A and B provisioned; B has a run bound to its pod with a CONFIRMED
    compensatable step 0 and an UNKNOWN step 1 a person settled "did not happen", all written
    by B's own sidecar credential and the operator's."""
    with psycopg.connect(pg) as conn:
        for namespace in (A, B):
            roles.provision(conn, namespace)
    b_sidecar = with_user(pg, roles.namespace_role(B, "sidecar"))
    with SagaLog(b_sidecar, min_size=1, max_size=2).open(migrate=False) as log:
        run = log.begin_run(VICTIM, namespace=B, pod_uid="pod-b", owner="pod-b").run
        epoch = run.owner_epoch
        log.record_intent(VICTIM, epoch, 0, tool="charge", tool_class="compensatable",
                          key=step_key(VICTIM, 0, "charge"),
                          args={"card": "4242424242424242", "amount": 1200},
                          compensation=REFUND, audience=["agent"])
        log.record_outcome(VICTIM, epoch, 0, StepStatus.CONFIRMED, external_ref="ch_1")
        log.record_intent(VICTIM, epoch, 1, tool="wire", tool_class="irreversible",
                          key=step_key(VICTIM, 1, "wire"), args={"amount": 5},
                          compensation=None, audience=["finance"])
        log.record_outcome(VICTIM, epoch, 1, StepStatus.UNKNOWN, error="timeout")
        log.ask_human(VICTIM, epoch, 1, step_key(VICTIM, 1, "wire"), "no lookup")
    with SagaLog(with_user(pg, roles.OPERATOR), min_size=1, max_size=1).open(
            migrate=False) as log:
        log.settle_step(VICTIM, 1, SettlementOutcome.NOT_HAPPENED, settler="alice",
                        reason="checked the bank")
    return pg


ATTACKS = {
    "rewrite a CONFIRMED step's compensation":
        ("UPDATE saga_log SET compensation = %s WHERE run_id = %s AND step_idx = 0",
         (json.dumps(PAYOUT), VICTIM)),
    "re-bind the run to the attacker's pod":
        ("UPDATE saga_runs SET pod_uid = 'pod-a', owner = 'pod-a',"
         " owner_epoch = owner_epoch + 1 WHERE run_id = %s", (VICTIM,)),
    "settle a step by writing its status":
        ("UPDATE saga_log SET status = 'CONFIRMED', external_ref = 'fake' WHERE run_id = %s"
         " AND step_idx = 1", (VICTIM,)),
    "add an observation overriding a person's settlement":
        ("INSERT INTO saga_observations (run_id, step_idx, idempotency_key, outcome,"
         " external_ref, writer_epoch) VALUES (%s, 1, %s, 'CONFIRMED', 'fake', 99)",
         (VICTIM, step_key(VICTIM, 1, "wire"))),
    "change the masked arguments an approver sees":
        ("UPDATE saga_log SET args = '{\"amount\": 1}' WHERE run_id = %s AND step_idx = 0",
         (VICTIM,)),
    "rewrite the person's settlement":
        ("UPDATE step_settlements SET outcome = 'Happened' WHERE run_id = %s", (VICTIM,)),
    "write the pivot decision":
        ("UPDATE saga_runs SET pivot_decision = '{}' WHERE run_id = %s", (VICTIM,)),
    "delete the steps": ("DELETE FROM saga_log WHERE run_id = %s", (VICTIM,)),
}


def _attempt(dsn: str, statement: str, params: tuple[object, ...]) -> str:
    """'refused' (a permission error), or how many rows the statement changed."""
    try:
        with psycopg.connect(dsn) as conn:
            return str(conn.execute(statement, params).rowcount)
    except psycopg.errors.InsufficientPrivilege:
        return "refused"


@pytest.mark.parametrize("kind", ["sidecar", "job"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_another_namespaces_credential_changes_nothing(two_namespaces: str, kind: str,
                                                       attack: str) -> None:
    before = _snapshot(two_namespaces)
    answer = _attempt(with_user(two_namespaces, roles.namespace_role(A, kind)), *ATTACKS[attack])
    assert answer in ("refused", "0"), answer
    assert _snapshot(two_namespaces) == before


@pytest.mark.parametrize("attack", [
    "rewrite a CONFIRMED step's compensation", "re-bind the run to the attacker's pod",
    "settle a step by writing its status", "change the masked arguments an approver sees",
    "rewrite the person's settlement", "write the pivot decision", "delete the steps"])
def test_the_runs_own_sidecar_cannot_rewrite_it_either(two_namespaces: str, attack: str) -> None:
    """Within its namespace a sidecar writes intents, outcomes and observations; the rest of a
    row is the log's history."""
    before = _snapshot(two_namespaces)
    answer = _attempt(with_user(two_namespaces, roles.namespace_role(B, "sidecar")),
                      *ATTACKS[attack])
    assert answer == "refused", answer
    assert _snapshot(two_namespaces) == before


WRITTEN_ONCE = {
    # a column a sidecar may write only when it sends a step again, and a value it differs by
    "compensation": "'{\"tool\": \"payout\", \"args\": {}}'::jsonb",
    "audience": "array_append(audience, 'attacker')",
    "writer_epoch": "writer_epoch + 1",
    "deadline": "COALESCE(deadline, now()) + interval '1 day'",
    "attempt": "attempt + 1",
    "contract_hash": "COALESCE(contract_hash, '') || 'x'",
    "contract": "'{\"tool\": \"charge\"}'::jsonb",
}


@pytest.mark.parametrize("column", sorted(WRITTEN_ONCE))
def test_an_outcome_cannot_rewrite_what_only_a_resend_writes(two_namespaces: str,
                                                              column: str) -> None:
    """Each column the sidecar may write only when it sends a NOT_EXECUTED step again, changed
    alone (or with an outcome) on a CONFIRMED step: the guard refuses, naming the column."""
    before = _snapshot(two_namespaces)
    for also in ("", ", status = 'CONFIRMED', result = '{\"ok\": 1}'::jsonb"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match=rf"may not rewrite step {VICTIM}/0 \({column}\)"), \
                psycopg.connect(with_user(two_namespaces, roles.namespace_role(B, "sidecar"))) \
                as conn:
            conn.execute(f"UPDATE saga_log SET {column} = {WRITTEN_ONCE[column]}{also}"
                         " WHERE run_id = %s AND step_idx = 0", (VICTIM,))
    assert _snapshot(two_namespaces) == before


def test_another_namespaces_runs_are_invisible(two_namespaces: str) -> None:
    for kind in ("sidecar", "job"):
        with psycopg.connect(with_user(two_namespaces, roles.namespace_role(A, kind))) as conn:
            for table in roles.RUN_TABLES:
                assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)  # noqa: S608
    with psycopg.connect(with_user(two_namespaces, roles.namespace_role(B, "job"))) as conn:
        assert conn.execute("SELECT count(*) FROM saga_log").fetchone() == (2,)
    with psycopg.connect(with_user(two_namespaces, roles.OPERATOR)) as conn:
        assert conn.execute("SELECT count(*) FROM saga_log").fetchone() == (2,)


@pytest.fixture
def attacker(two_namespaces: str) -> Iterator[SagaLog]:
    with SagaLog(with_user(two_namespaces, roles.namespace_role(A, "sidecar")), min_size=1,
                 max_size=1).open(migrate=False) as log:
        yield log


def test_the_store_used_with_another_namespaces_credential_changes_nothing(
        two_namespaces: str, attacker: SagaLog) -> None:
    before = _snapshot(two_namespaces)
    tries: dict[str, Callable[[], object]] = {
        "begin (adopt) the run": lambda: attacker.begin_run(VICTIM, namespace=B, pod_uid="pod-a"),
        "adopt the run": lambda: attacker.adopt(VICTIM, "pod-a"),
        "compensate step 0": lambda: attacker.record_compensation(
            VICTIM, 2, 0, CompensationStatus.DONE, compensated=True),
        "write an outcome": lambda: attacker.record_outcome(
            VICTIM, 1, 1, StepStatus.CONFIRMED, expect=(StepStatus.NOT_EXECUTED,)),
    }
    for name, attempt in tries.items():
        with pytest.raises((SagaError, LookupError)):
            attempt()
            pytest.fail(f"{name}: not refused")
    assert attacker.run(VICTIM) is None and attacker.steps(VICTIM) == []
    assert _snapshot(two_namespaces) == before


def test_adding_a_namespace_is_idempotent_and_named_by_the_namespace(pg: str) -> None:
    with psycopg.connect(pg) as conn:
        first = roles.provision(conn, "support-agents", {"sidecar": "s3cret"})
        again = roles.provision(conn, "support-agents")
        assert first == again == {"sidecar": "agentsaga_ns_support_agents",
                                  "job": "agentsaga_job_support_agents"}
        assert roles.credentials(conn)["agentsaga_ns_support_agents"] == (
            "support-agents", "sidecar")
    long = "n" * 63
    assert len(roles.namespace_role(long, "sidecar")) <= 63
    assert roles.namespace_role(long, "job") != roles.namespace_role("n" * 62, "job")


def test_agentsaga_migrate_provisions_one_credential_of_each_kind_per_namespace(
        pg: str, tmp_path: Path) -> None:
    passwords = tmp_path / "passwords"
    passwords.mkdir()
    (passwords / "agentsaga_ns_team_x").write_text("from-the-secret\n")
    done = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "migrate", "--dsn", pg, "--namespace", "team-x",
         "--namespace", "team-y", "--passwords-dir", str(passwords)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "namespace team-x: sidecar agentsaga_ns_team_x, job agentsaga_job_team_x" in (
        done.stdout)
    with psycopg.connect(pg) as conn:
        assert {role: ns for role, (ns, _) in roles.credentials(conn).items()}.items() >= {
            "agentsaga_ns_team_x": "team-x", "agentsaga_job_team_x": "team-x",
            "agentsaga_ns_team_y": "team-y", "agentsaga_job_team_y": "team-y"}.items()
        with_password = {str(r[0]) for r in conn.execute(
            "SELECT rolname FROM pg_authid WHERE rolname LIKE 'agentsaga_%%_team_x'"
            " AND rolpassword IS NOT NULL")}
    assert with_password == {"agentsaga_ns_team_x"}


@pytest.mark.parametrize(("credential", "refused"), [
    ("agentsaga_sidecar", "its database credential is for runs outside Kubernetes"),
    (roles.namespace_role(B, "sidecar"), f"its database credential is for namespace '{B}'"),
])
def test_a_sidecar_given_a_credential_not_of_its_namespace_refuses_to_start(
        two_namespaces: str, credential: str, refused: str) -> None:
    """Every run would be refused by Postgres; the sidecar says so at once, and what to give it
    instead."""
    done = subprocess.run(
        [sys.executable, "-P", "-m", "agentsaga.cli", "sidecar", "--listen", "127.0.0.1:0",
         "--tools", "sagatest.ledger_tools", "--dsn", with_user(two_namespaces, credential)],
        env={**_env(), "AGENTSAGA_POD_NAMESPACE": A}, capture_output=True, text=True,
        timeout=60, check=False)
    assert done.returncode != 0
    assert f"this sidecar serves namespace '{A}' but {refused}" in done.stderr, done.stderr
    assert "postgres.credentials.location" in done.stderr
    assert f"agentsaga migrate --namespace {A}" in done.stderr


def _env() -> dict[str, str]:
    import os
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENTSAGA_")}



def _heard_until(conn: psycopg.Connection[tuple[object, ...]], last: str) -> list[str]:
    """What `conn` heard up to and including the payload `last` (announcements arrive in the
    order their transactions committed)."""
    heard: list[str] = []
    for note in conn.notifies(timeout=30.0):
        heard.append(note.payload)
        if note.payload == last:
            return heard
    raise AssertionError(f"{last!r} never arrived; heard {heard}")


def test_no_namespace_hears_the_runs_of_another(pg: str) -> None:
    """Runs are announced on a channel whose name only the operator's role may read: A's
    credential can neither read it, nor hear B's run on the old fixed channel, nor redirect the
    announcements of its own runs with a temporary `run_channel`; the operator hears both."""
    with psycopg.connect(pg) as conn:
        for namespace in (A, B):
            roles.provision(conn, namespace)
    a_sidecar = with_user(pg, roles.namespace_role(A, "sidecar"))
    with psycopg.connect(a_sidecar, autocommit=True) as spy, \
            psycopg.connect(with_user(pg, roles.OPERATOR), autocommit=True) as operator:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            spy.execute("SELECT name FROM run_channel")
        [(channel,)] = operator.execute("SELECT name FROM run_channel").fetchall()
        operator.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        spy.execute("LISTEN agentsaga_runs")
        spy.execute("LISTEN stolen")
        b_sidecar = with_user(pg, roles.namespace_role(B, "sidecar"))
        with SagaLog(b_sidecar, min_size=1, max_size=1).open(migrate=False) as log:
            log.begin_run(VICTIM, namespace=B, pod_uid="pod-b", owner="pod-b")
        # A's own run, begun on a connection whose temporary run_channel names `stolen`: A's
        # credential may not create one (no TEMPORARY), so the test grants it that here to
        # show the announcement does not depend on the refusal
        with psycopg.connect(a_sidecar, autocommit=True) as own, \
                pytest.raises(psycopg.errors.InsufficientPrivilege):
            own.execute("CREATE TEMPORARY TABLE run_channel (one BOOLEAN, name TEXT)")
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute(sql.SQL("GRANT TEMPORARY ON DATABASE {} TO {}").format(
                sql.Identifier(str(admin.info.dbname)),
                sql.Identifier(roles.namespace_role(A, "sidecar"))))
        with psycopg.connect(a_sidecar, autocommit=True) as own:
            own.execute("CREATE TEMPORARY TABLE run_channel (one BOOLEAN, name TEXT)")
            own.execute("INSERT INTO run_channel VALUES (true, 'stolen')")
            own.execute("INSERT INTO saga_runs (run_id, namespace, pod_uid, owner)"
                        " VALUES (%s, %s, 'pod-a', 'pod-a')", (f"{A}/own-1", A))
        with psycopg.connect(pg, autocommit=True) as marker:
            marker.execute(sql.SQL("NOTIFY {}, 'end'").format(sql.Identifier(channel)))
            marker.execute("NOTIFY agentsaga_runs, 'end'")
            marker.execute("NOTIFY stolen, 'end'")
        assert _heard_until(operator, "end") == [VICTIM, f"{A}/own-1", "end"]
        assert _heard_until(spy, "end") == ["end"]
