"""The pivot (R10) through the real sidecar: stage, approve by hash, commit only what was
approved."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import grpc
import psycopg
import pytest

from agentsaga.client import ApprovalRequired, SagaClient
from agentsaga.saga.pivot import canonical
from sagatest import ledger_tools
from sagatest.ledger_tools import calls, effects
from sagatest.sidecar_fixtures import ROOT, SidecarProcess

TOOLS = "sagatest.ledger_tools"
Factory = Callable[..., SidecarProcess]
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


def approve(dsn: str, run_id: str, plan_hash: str, decision: str = "Approved"
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "approve", "--dsn", dsn, "--run", run_id,
         "--plan-hash", plan_hash, "--decision", decision, "--approver", "alice",
         "--reason", "checked the plan"],
        capture_output=True, text=True, cwd=ROOT, timeout=60)


def stage_refund(client: SagaClient, run_id: str) -> str:
    client.dispatch(run_id, "search_orders", {"order_id": "1182"})
    client.dispatch(run_id, "create_draft", {"body": "draft of the apology"})
    charge = client.dispatch(run_id, "charge_card", {"customer_id": "cus_1", "amount": 500})
    staged = client.reach_pivot(run_id, [
        {"tool": "capture_charge", "args": {"charge_ref": charge["id"]}},
        {"tool": "send_email", "args": EMAIL},
    ])
    assert staged.state == "AwaitingApproval" and len(staged.plan_hash) == 64
    return staged.plan_hash


def test_reordered_run_commits_only_after_approval(sidecar_factory: Factory, ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("refund-1182")
    with pytest.raises(ApprovalRequired, match="irreversible"):  # the model reorders the plan
        client.dispatch("refund-1182", "send_email", EMAIL)
    assert effects(ledger, "email") == []
    plan_hash = stage_refund(client, "refund-1182")

    with pytest.raises(ApprovalRequired, match="waiting for approval"):
        client.dispatch("refund-1182", "capture_charge", {"charge_ref": "x"})
    stale = approve(ledger, "refund-1182", "0" * 64)
    assert stale.returncode == 2 and "stale approval" in stale.stderr
    assert client.await_decision("refund-1182", timeout=0.1).state == "AwaitingApproval"

    ok = approve(ledger, "refund-1182", plan_hash)
    assert ok.returncode == 0, ok.stderr
    decided = client.await_decision("refund-1182", timeout=5)
    assert decided.state == "Approved" and '"decidedBy": "alice"' in decided.pivot_json

    with pytest.raises(ApprovalRequired, match="not in the approved plan"):
        client.dispatch("refund-1182", "send_email", {**EMAIL, "body": "something else"})
    charge_ref = f"CHARGE-{effects(ledger, 'charge')[0]['id']}"
    client.dispatch("refund-1182", "capture_charge", {"charge_ref": charge_ref})
    client.dispatch("refund-1182", "send_email", EMAIL)
    with pytest.raises(ApprovalRequired, match="already ran"):  # consumed: no second email
        client.dispatch("refund-1182", "send_email", EMAIL)
    assert len(effects(ledger, "email")) == 1 and len(effects(ledger, "capture")) == 1
    run = client.get_run("refund-1182")
    assert run.irreversible_before_pivot == 0
    assert [(s.tool, s.status) for s in run.steps] == [
        ("create_draft", "CONFIRMED"), ("charge_card", "CONFIRMED"),
        ("capture_charge", "CONFIRMED"), ("send_email", "CONFIRMED")]


def test_rejection_ends_the_run_and_sends_nothing(sidecar_factory: Factory, ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("rejected-run")
    plan_hash = stage_refund(client, "rejected-run")
    assert approve(ledger, "rejected-run", plan_hash, "Rejected").returncode == 0
    assert client.await_decision("rejected-run", timeout=5).state == "Rejected"
    with pytest.raises(grpc.RpcError) as error:
        client.dispatch("rejected-run", "send_email", EMAIL)
    assert error.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert effects(ledger, "email") == [] and calls(ledger, "send_email") == []
    again = approve(ledger, "rejected-run", plan_hash, "Approved")
    assert again.returncode == 2 and "not awaiting approval" in again.stderr


def test_count_policy_runs_and_counts_irreversible_before_pivot(sidecar_factory: Factory,
                                                                ledger: str) -> None:
    client = sidecar_factory(
        ledger, TOOLS, env={"AGENTSAGA_IRREVERSIBLE_BEFORE_PIVOT": "count"}).client()
    client.begin_run("eager")
    client.dispatch("eager", "send_email", EMAIL)
    assert len(effects(ledger, "email")) == 1
    assert client.get_run("eager").irreversible_before_pivot == 1


def test_staging_with_an_unknown_tool_or_unresolved_step_is_refused(
        sidecar_factory: Factory, ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("bad-plan")
    with pytest.raises(grpc.RpcError) as error:
        client.reach_pivot("bad-plan", [{"tool": "wire_money", "args": {}}])
    assert error.value.code() is grpc.StatusCode.NOT_FOUND
    ledger_tools.add_fault(ledger, "create_draft", "unknown_after_commit")
    with pytest.raises(Exception, match="unknown"):
        client.dispatch("bad-plan", "create_draft", {"body": "x"})
    with pytest.raises(grpc.RpcError) as unresolved:
        client.reach_pivot("bad-plan", [{"tool": "send_email", "args": EMAIL}])
    assert "resolve it before staging" in (unresolved.value.details() or "")


def test_a_card_number_in_an_approved_step_still_matches_what_the_approver_saw(
        sidecar_factory: Factory, ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("card-run")
    email = {"to": "dana@example.com", "body": "Refunded to card 4242 4242 4242 4242."}
    staged = client.reach_pivot("card-run", [{"tool": "send_email", "args": email}])
    assert "4242 4242 4242 4242" not in staged.pivot_json and "****4242" in staged.pivot_json
    assert approve(ledger, "card-run", staged.plan_hash).returncode == 0
    client.dispatch("card-run", "send_email", email)
    assert len(effects(ledger, "email")) == 1


def test_an_ended_run_cannot_reach_a_pivot(sidecar_factory: Factory, ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("over")
    client.end_run("over", "Failed")
    with pytest.raises(grpc.RpcError) as error:
        client.reach_pivot("over", [{"tool": "send_email", "args": EMAIL}])
    assert error.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "has ended" in (error.value.details() or "")


def test_an_approved_commit_step_runs_once_even_when_settled_by_lookup(
        sidecar_factory: Factory, ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("once-run")
    capture: dict[str, Any] = {"tool": "capture_charge", "args": {"charge_ref": "CHARGE-1"}}
    staged = client.reach_pivot("once-run", [capture])
    assert approve(ledger, "once-run", staged.plan_hash).returncode == 0
    ledger_tools.add_fault(ledger, "capture_charge", "unknown_after_commit")
    with pytest.raises(Exception, match="outcome unknown"):
        client.dispatch("once-run", "capture_charge", capture["args"])
    client.dispatch("once-run", "capture_charge", capture["args"])  # found by its key
    with pytest.raises(ApprovalRequired, match="already ran: it is commit step 0"):
        client.dispatch("once-run", "capture_charge", capture["args"])
    assert len(effects(ledger, "capture")) == 1


def test_an_approved_card_admits_no_other_card_with_the_same_last_four(
        sidecar_factory: Factory, ledger: str) -> None:
    """The stored plan shows both cards by their last four and a keyed digest of the whole
    number; the approval holds the digest of the raw arguments, so only the card that was
    approved is admitted."""
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("card-4242")
    approved = {"to": "customer@example.com", "body": "card 4242 4242 4242 4242 refunded"}
    other = {"to": "customer@example.com", "body": "card 4000 0000 0002 4242 refunded"}
    staged = client.reach_pivot("card-4242", [{"tool": "send_email", "args": approved}])
    assert "4242 4242 4242 4242" not in staged.pivot_json
    assert "[card ****4242 #" in staged.pivot_json and '"argsDigest"' in staged.pivot_json
    assert approve(ledger, "card-4242", staged.plan_hash).returncode == 0
    assert client.await_decision("card-4242", timeout=5).state == "Approved"
    with pytest.raises(ApprovalRequired, match="not in the approved plan"):
        client.dispatch("card-4242", "send_email", other)
    assert effects(ledger, "email") == []
    client.dispatch("card-4242", "send_email", approved)
    assert [e["body"]["body"] for e in effects(ledger, "email")] == [approved["body"]]


def test_the_shown_digest_is_keyed_by_a_secret_only_the_log_holds(
        sidecar_factory: Factory, ledger: str) -> None:
    """Beside `[card ****4242]` a plain SHA-256 of the arguments would give the card away (at
    most 10^11 candidates); the digest shown is an HMAC under a per-run key that the saga log
    keeps and nothing shows, so the same arguments show different digests in two runs."""
    client = sidecar_factory(ledger, TOOLS).client()
    args = {"to": "customer@example.com", "body": "card 4242 4242 4242 4242 refunded"}
    shown: list[str] = []
    for run_id in ("keyed-1", "keyed-2"):
        client.begin_run(run_id)
        staged = client.reach_pivot(run_id, [{"tool": "send_email", "args": args}])
        [step] = json.loads(staged.pivot_json)["commit"]
        shown.append(step["argsDigest"])
        assert "digestKey" not in staged.pivot_json
        assert "digestKey" not in client.get_run(run_id).pivot_json
        with psycopg.connect(ledger) as conn:
            row = conn.execute("SELECT pivot->>'digestKey' FROM saga_runs WHERE run_id = %s",
                               (run_id,)).fetchone()
        assert row is not None and row[0]
        keyed = hmac.new(base64.urlsafe_b64decode(row[0]), canonical(args).encode(),
                         hashlib.sha256).hexdigest()
        assert step["argsDigest"] == keyed
    assert hashlib.sha256(canonical(args).encode()).hexdigest() not in shown
    assert shown[0] != shown[1]
    printed = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "log", "--run", "keyed-1", "--json", "--dsn",
         ledger], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert printed.returncode == 0 and shown[0] in printed.stdout, printed.stderr
    assert "digestKey" not in printed.stdout
