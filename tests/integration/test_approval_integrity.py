"""What the approver reads is what runs (R10), held by the saga log against a namespace's own
sidecar credential: the plan hash covers the shown arguments and their digests; a staged plan
cannot be changed (migration 019's trigger), by the role that staged it or any other; a plan
whose shown arguments and digests disagree is not recorded as approved, and its calls are not
admitted; cards in a plan are told apart by a keyed digest; an approval of a plan staged longer
ago than its time-to-live is refused. The world's ground truth is the ledger's rows."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from agentsaga import NO_LOOKUP, Registry
from agentsaga.errors import ApprovalExpired, PivotError, RunEnded
from agentsaga.operator import approval, human_input
from agentsaga.operator.human_input import Refused
from agentsaga.redact import card_digest
from agentsaga.saga.pivot import args_digest, plan_hash, record_decision, shown_args
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import PivotState, RunState
from agentsaga.store import PivotRecord, SagaLog, roles
from agentsaga.store.connections import with_user
from sagatest import ledger_tools

NS, RUN = "shop", "refund-1182"
LOGGED = f"{NS}/{RUN}"
REFUND_ACCOUNT = "DE89 3704 0044 0532 0130 00 (customer refund account)"
SHOWN = {"account": REFUND_ACCOUNT, "amount": 12}
EVIL = {"account": "GB33 BUKB 2020 1555 5555 55 (elsewhere)", "amount": 99999}
VISA, OTHER_VISA = "4242 4242 4242 4242", "4000 0000 0002 4242"  # both Luhn-valid, ...4242


def payouts(ledger: str) -> list[dict[str, Any]]:
    """The world's ground truth: every payout made."""
    with psycopg.connect(ledger) as conn:
        rows = conn.execute("SELECT body FROM ledger WHERE kind = 'payout' ORDER BY id")
        return [dict(body) for (body,) in rows.fetchall()]


def registry() -> Registry:
    """The ledger's tools and an irreversible payout, a commit step a person approves."""
    tools = ledger_tools.build_registry()

    @tools.tool(cls="irreversible", audience=["finance", "customer"], lookup=NO_LOOKUP)
    def payout(account: str, amount: int, idempotency_key: str) -> dict[str, Any]:
        with psycopg.connect(os.environ["LEDGER_DSN"]) as conn:
            conn.execute("INSERT INTO ledger (kind, key, body) VALUES ('payout', %s, %s)",
                         (idempotency_key, Jsonb({"account": account, "amount": amount})))
        return {"paid": amount}

    return tools


@dataclass
class Shop:
    """Namespace `shop`: its sidecar (on its own credential), that credential's own connection
    (what whoever holds it can do), the operator's log, and the migration role's DSN."""

    service: SagaService
    operator: SagaLog
    sidecar_dsn: str
    owner_dsn: str

    def stage(self, *steps: dict[str, Any]) -> PivotRecord:
        self.service.begin_run(RUN)
        return self.service.reach_pivot(
            RUN, [{"tool": "payout", "args": args} for args in steps or (SHOWN,)])

    def stored(self) -> dict[str, Any]:
        with psycopg.connect(self.owner_dsn) as conn:
            row = conn.execute("SELECT to_jsonb(r) FROM saga_runs r WHERE run_id = %s",
                               (LOGGED,)).fetchone()
        assert row is not None
        return dict(row[0])

    def as_sidecar(self, sql: str, *params: Any) -> None:
        with psycopg.connect(self.sidecar_dsn) as conn:
            conn.execute(sql, params)

    def backdate(self, seconds: float) -> None:
        """Move the plan's stagedAt into the past (the migration role, triggers off: no
        tenant can)."""
        at = (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        with psycopg.connect(self.owner_dsn) as conn:
            conn.execute("SET session_replication_role = replica")
            conn.execute("UPDATE saga_runs SET pivot = jsonb_set(pivot, '{stagedAt}', %s)"
                         " WHERE run_id = %s", (Jsonb(at), LOGGED))


@pytest.fixture
def shop(pg: str, ledger: str) -> Iterator[Shop]:
    with psycopg.connect(pg) as conn:
        roles.provision(conn, NS)
    sidecar_dsn = with_user(pg, roles.namespace_role(NS, "sidecar"))
    sidecar = SagaLog(sidecar_dsn, min_size=1, max_size=2).open(migrate=False)
    operator = SagaLog(with_user(pg, roles.OPERATOR), min_size=1, max_size=1).open(
        migrate=False)
    service = SagaService(sidecar, registry(), Settings(recheck_pause_s=0.01, pod_namespace=NS),
                          sleep=lambda _: None)
    try:
        yield Shop(service, operator, sidecar_dsn, pg)
    finally:
        sidecar.close()
        operator.close()


def forged(record: PivotRecord, shown: dict[str, Any], runs: dict[str, Any]) -> dict[str, Any]:
    """The plan as whoever holds the sidecar's credential would rewrite it: the commit step
    shown with `shown`, digested as `runs`, and the plan hash computed over that."""
    commit = [{**record.commit[0], "args": shown, "argsDigest": args_digest(
        runs, record.digest_key)}]
    plan = {**record.to_json(), "commit": commit}
    plan["planHash"] = plan_hash(record.staged, commit)
    return plan


def test_a_staged_payout_cannot_be_rewritten_to_pay_another_account(
        shop: Shop, ledger: str) -> None:
    """The review's finding: the plan shows "payout 12 to the customer's refund account"; the
    sidecar's credential rewrites the staged plan so that its digest admits 99999 to another
    account, with a plan hash to match. The saga log refuses the rewrite, before and after
    the approval; the approver's approval admits only the payout shown."""
    record = shop.stage()
    before = shop.stored()
    rewrite = "UPDATE saga_runs SET pivot = %s WHERE run_id = %s"
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="cannot be changed"):
        shop.as_sidecar(rewrite, Jsonb(forged(record, SHOWN, EVIL)), LOGGED)
    assert shop.stored() == before

    decided = record_decision(shop.operator, LOGGED, record.plan_hash, "Approved", "alice")
    assert decided.commit[0]["args"] == SHOWN
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="was decided"):
        shop.as_sidecar(rewrite, Jsonb(forged(record, SHOWN, EVIL)), LOGGED)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        shop.as_sidecar("UPDATE saga_runs SET pivot = NULL WHERE run_id = %s", LOGGED)
    assert shop.stored()["pivot"] == before["pivot"]

    refused = shop.service.dispatch(RUN, "payout", EVIL)
    assert refused.outcome == "NEEDS_APPROVAL" and "not in the approved plan" in refused.message
    assert payouts(ledger) == []
    paid = shop.service.dispatch(RUN, "payout", SHOWN)
    assert paid.outcome == "CONFIRMED"
    assert payouts(ledger) == [SHOWN]


def test_a_plan_staged_forged_by_the_sidecars_credential_is_not_approved(
        shop: Shop, ledger: str) -> None:
    """Written forged from the start (the credential stages it itself, its hash computed over
    the forgery): the operator checks each shown argument against its digest and records
    nothing; the payout it would have admitted is refused."""
    record = shop.stage()
    with psycopg.connect(shop.owner_dsn) as conn:  # as if this plan had been the first
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE saga_runs SET pivot = NULL WHERE run_id = %s", (LOGGED,))
    plan = forged(record, SHOWN, EVIL)
    shop.as_sidecar("UPDATE saga_runs SET pivot = %s WHERE run_id = %s", Jsonb(plan), LOGGED)
    with pytest.raises(PivotError, match="commit step 0 is shown with arguments that are not "
                                         "the ones its digest"):
        record_decision(shop.operator, LOGGED, plan["planHash"], "Approved", "alice")
    assert shop.stored()["pivot_decision"] is None
    assert shop.service.dispatch(RUN, "payout", EVIL).outcome == "NEEDS_APPROVAL"
    assert payouts(ledger) == []


def test_an_approved_step_runs_only_with_arguments_that_show_as_approved(
        shop: Shop, ledger: str) -> None:
    """A masked card cannot be checked against its digest by the operator (the number is not
    stored): a plan forged to show one card and digest another is approved, and then admits
    neither call: the call's arguments must digest to the approved digest and show as the
    approved arguments."""
    real = {"account": VISA, "amount": 12}
    evil = {"account": OTHER_VISA, "amount": 99999}
    record = shop.stage(real)
    with psycopg.connect(shop.owner_dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE saga_runs SET pivot = NULL WHERE run_id = %s", (LOGGED,))
    plan = forged(record, record.commit[0]["args"], evil)
    shop.as_sidecar("UPDATE saga_runs SET pivot = %s WHERE run_id = %s", Jsonb(plan), LOGGED)
    record_decision(shop.operator, LOGGED, plan["planHash"], "Approved", "alice")
    for args in (evil, real):
        out = shop.service.dispatch(RUN, "payout", args)
        assert out.outcome == "NEEDS_APPROVAL", out
    assert payouts(ledger) == []


def test_the_plan_hash_covers_the_shown_arguments_and_their_digests(shop: Shop) -> None:
    record = shop.stage()
    assert record.plan_hash == plan_hash(record.staged, record.commit)
    step = record.commit[0]
    for changed in ({**step, "args": {**SHOWN, "amount": 13}},
                    {**step, "argsDigest": args_digest(EVIL, record.digest_key)}):
        assert plan_hash(record.staged, [changed]) != record.plan_hash


def test_only_a_sidecar_credential_or_the_owner_stages_and_a_temp_table_makes_no_stager(
        shop: Shop) -> None:
    """A role that may write the column but is not positively a stager (no sidecar row in
    agentsaga_credentials, not the owner) is refused, and a temporary `agentsaga_credentials`
    that claims it is one is not read (the triggers' search_path puts pg_temp last): the
    run's guard (no credential row) or the plan's (not a stager) refuses, whichever fires
    first."""
    shop.service.begin_run(RUN)
    with psycopg.connect(shop.owner_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS agentsaga_intruder")
        conn.execute("CREATE ROLE agentsaga_intruder LOGIN BYPASSRLS")
        conn.execute("GRANT USAGE ON SCHEMA public TO agentsaga_intruder")
        conn.execute("GRANT SELECT, UPDATE (pivot) ON saga_runs TO agentsaga_intruder")
        conn.execute("GRANT SELECT ON agentsaga_credentials TO agentsaga_intruder")
        conn.execute("GRANT TEMPORARY ON DATABASE " + str(conn.info.dbname)
                     + " TO agentsaga_intruder")
    plan = {"state": "AwaitingApproval", "planHash": "x", "staged": [], "commit": []}
    try:
        with psycopg.connect(with_user(shop.owner_dsn, "agentsaga_intruder")) as conn:
            conn.execute("CREATE TEMP TABLE agentsaga_credentials"
                         " (role_name TEXT, namespace TEXT, kind TEXT)")
            conn.execute("INSERT INTO agentsaga_credentials VALUES"
                         " ('agentsaga_intruder', 'shop', 'sidecar')")
            with pytest.raises(psycopg.errors.InsufficientPrivilege,
                               match="agentsaga_intruder (may not stage or change the plan"
                                     "|is no credential of the saga log)"):
                conn.execute("UPDATE saga_runs SET pivot = %s WHERE run_id = %s",
                             (Jsonb(plan), LOGGED))
        for role in (roles.OPERATOR, roles.namespace_role(NS, "job")):
            with psycopg.connect(with_user(shop.owner_dsn, role)) as conn, pytest.raises(
                    psycopg.errors.InsufficientPrivilege):
                conn.execute("UPDATE saga_runs SET pivot = %s WHERE run_id = %s",
                             (Jsonb(plan), LOGGED))
        assert shop.stored()["pivot"] is None
    finally:
        with psycopg.connect(shop.owner_dsn, autocommit=True) as conn:
            conn.execute("DROP OWNED BY agentsaga_intruder")
            conn.execute("DROP ROLE agentsaga_intruder")


def test_the_same_plan_staged_again_changes_nothing_and_another_waits_for_expiry(
        shop: Shop) -> None:
    """A restarted agent staging its plan again gets it back as it was (stagedAt too); another
    plan is refused while this one may still be approved, and replaces it once its approval
    time-to-live has passed undecided, staged at the database's time."""
    record = shop.stage()
    assert shop.stage() == record
    assert shop.stored()["pivot"]["stagedAt"] == record.staged_at
    with pytest.raises(PivotError, match="a staged plan cannot be changed"):
        shop.stage({**SHOWN, "amount": 13})
    assert shop.stored()["pivot"]["planHash"] == record.plan_hash
    shop.backdate(86400 + 60)  # the default time-to-live: the operator has copied no policy
    replaced = shop.stage({**SHOWN, "amount": 13})
    assert replaced.plan_hash != record.plan_hash
    assert replaced.commit[0]["args"] == {**SHOWN, "amount": 13}
    staged_at = datetime.fromisoformat(replaced.staged_at.replace("Z", "+00:00"))
    assert abs((datetime.now(UTC) - staged_at).total_seconds()) < 60
    record_decision(shop.operator, LOGGED, replaced.plan_hash, "Rejected", "bob")
    shop.backdate(86400 + 60)
    with pytest.raises(RunEnded):  # a rejected plan unwinds the run: no pivot again
        shop.service.reach_pivot(RUN, [{"tool": "payout", "args": SHOWN}])
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="was decided"):
        shop.as_sidecar("UPDATE saga_runs SET pivot = jsonb_set(pivot, '{commit}', '[]')"
                        " WHERE run_id = %s", LOGGED)


def test_the_staging_time_is_the_databases_clock(shop: Shop) -> None:
    """Whoever stages cannot make a plan look younger: stagedAt is stamped by the trigger."""
    shop.service.begin_run(RUN)
    plan = {"state": "AwaitingApproval", "planHash": "x", "stagedAt": "2099-01-01T00:00:00Z",
            "staged": [], "commit": []}
    shop.as_sidecar("UPDATE saga_runs SET pivot = %s WHERE run_id = %s", Jsonb(plan), LOGGED)
    stamped = shop.stored()["pivot"]["stagedAt"]
    assert stamped != plan["stagedAt"]
    at = datetime.fromisoformat(stamped.replace("Z", "+00:00"))
    assert abs((datetime.now(UTC) - at).total_seconds()) < 60


def test_two_accounts_ending_alike_look_different_to_the_approver(
        shop: Shop, ledger: str) -> None:
    """Last four and a digest of the whole number, keyed with the run's secret key (not a
    plain hash anyone could brute-force from the few million numbers with that ending)."""
    first, second = {"account": VISA, "amount": 12}, {"account": OTHER_VISA, "amount": 12}
    record = shop.stage(first, second)
    shown = [step["args"]["account"] for step in record.commit]
    assert shown == [f"[card ****4242 #{card_digest('4242424242424242', record.digest_key)}]",
                     f"[card ****4242 #{card_digest('4000000000024242', record.digest_key)}]"]
    assert shown[0] != shown[1]
    assert hashlib.sha256(b"4242424242424242").hexdigest()[:8] not in shown[0]
    assert VISA.replace(" ", "")[:12] not in json.dumps(shop.stored())
    assert shown_args(first, record.digest_key) == record.commit[0]["args"]
    record_decision(shop.operator, LOGGED, record.plan_hash, "Approved", "alice")
    assert shop.service.dispatch(RUN, "payout", first).outcome == "CONFIRMED"
    assert shop.service.dispatch(RUN, "payout", first).outcome == "NEEDS_APPROVAL"  # ran once
    assert shop.service.dispatch(RUN, "payout", second).outcome == "CONFIRMED"
    assert payouts(ledger) == [first, second]


def test_an_approval_of_a_plan_staged_too_long_ago_is_refused(shop: Shop) -> None:
    """The time-to-live counts from stagedAt (the database's clock); the clock of the check
    is given, so the outcome is certain. A rejection is never too late."""
    record = shop.stage()
    staged_at = datetime.fromisoformat(record.staged_at.replace("Z", "+00:00"))
    with pytest.raises(ApprovalExpired, match=(
            rf"approval of plan {record.plan_hash} refused: the plan was staged at "
            rf"{record.staged_at}, 601s ago, longer ago than its approval time-to-live of "
            r"600s \(spec.pivot.approvalTtlSeconds\)")) as refused:
        record_decision(shop.operator, LOGGED, record.plan_hash, "Approved", "alice", ttl=600,
                        now=lambda: staged_at + timedelta(seconds=601))
    assert "Approve again once the agent has staged the plan again" in str(refused.value)
    assert shop.stored()["pivot_decision"] is None
    assert shop.stored()["state"] == RunState.AWAITING_APPROVAL
    within = record_decision(shop.operator, LOGGED, record.plan_hash, "Approved", "alice",
                             ttl=600, now=lambda: staged_at + timedelta(seconds=600))
    assert within.state == PivotState.APPROVED


def test_a_rejection_is_recorded_however_old_the_plan(shop: Shop) -> None:
    record = shop.stage()
    staged_at = datetime.fromisoformat(record.staged_at.replace("Z", "+00:00"))
    decided = record_decision(shop.operator, LOGGED, record.plan_hash, "Rejected", "bob",
                              ttl=1, now=lambda: staged_at + timedelta(days=30))
    assert decided.state == PivotState.REJECTED


def test_the_operator_refuses_an_expired_approval_with_a_condition_that_says_what_to_do(
        shop: Shop) -> None:
    """The AgentRun's spec.pivot.approvalTtlSeconds, against a plan the test staged an hour
    ago: the approval is consumed, nothing is recorded, and PivotApproved is False with
    reason ApprovalExpired and what to do."""
    record = shop.stage()
    shop.backdate(3600)
    agentrun: dict[str, Any] = {
        "metadata": {"name": RUN, "namespace": NS, "generation": 1},
        "spec": {"agent": "a", "runId": RUN, "pivot": {"approvalTtlSeconds": 600}},
        "status": {"pivot": {"state": "AwaitingApproval", "planHash": record.plan_hash},
                   "approval": {"planHash": record.plan_hash, "decision": "Approved",
                                "approver": "alice"}}}
    given = agentrun["status"]["approval"]
    outcome = human_input.judge(approval.PIVOT_APPROVAL, shop.operator, None, agentrun, "",
                                given)
    assert isinstance(outcome, Refused) and outcome.reason == "ApprovalExpired"
    patch = approval.PIVOT_APPROVAL.patch(agentrun, "", given, outcome)
    [condition] = [c for c in patch["conditions"] if c["type"] == "PivotApproved"]
    assert (condition["status"], condition["reason"]) == ("False", "ApprovalExpired")
    assert "approval time-to-live of 600s" in condition["message"]
    assert "Approve again" in condition["message"]
    assert patch["approval"] is None
    assert shop.stored()["pivot_decision"] is None
