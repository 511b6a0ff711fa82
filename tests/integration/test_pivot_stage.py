"""Staging the pivot (R10) in the service itself: the record the approver sees, and each
reason a plan cannot be staged, with the log left as it was."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from agentsaga.errors import InvalidArguments, PivotError, RunEnded
from agentsaga.redact import card_digest
from agentsaga.saga.pivot import (
    MAX_COMMIT_STEPS,
    MAX_REVIEW_BYTES,
    args_digest,
    canonical,
    plan_hash,
    record_decision,
    shown,
)
from agentsaga.service.saga_service import SagaService
from agentsaga.store.interfaces import OperatorStore
from sagatest.ledger_tools import add_fault
from sagatest.traced import Traced

RUN = "stage-run"
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


def _email(size: int) -> dict[str, str]:
    """An email whose canonical JSON arguments are exactly `size` bytes."""
    args = {"to": "customer@example.com", "body": ""}
    args["body"] = "x" * (size - len(canonical(args).encode()))
    assert len(canonical(args).encode()) == size
    return args


@pytest.fixture
def service(ledger_service: SagaService) -> SagaService:
    return ledger_service


def test_the_staged_record_is_what_the_approver_sees(service: SagaService,
                                                     traced: Traced) -> None:
    service.begin_run(RUN)
    ticket = service.dispatch(RUN, "create_ticket", {"summary": "s", "order_id": "1"})
    record = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    staged = [{"step": 0, "tool": "create_ticket", "class": "compensatable",
               "status": "CONFIRMED", "audience": ["support_team"],
               "externalRef": ticket.external_ref}]
    assert record.digest_key  # the run's own key of its commit steps' digests
    commit = [{"tool": "send_email", "args": EMAIL, "class": "irreversible",
               "audience": ["customer"], "argsDigest": args_digest(EMAIL, record.digest_key)}]
    assert (record.state, record.staged, record.commit) == ("AwaitingApproval", staged, commit)
    again = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    assert again.plan_hash == record.plan_hash  # staged again: the same key, the same hash
    assert record.plan_hash == plan_hash(staged, commit)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record.staged_at)
    assert record.irreversible_before_pivot == 0
    run = service.saga_log.require_run(RUN)
    assert run.state == "awaiting_approval" and run.pivot == record
    assert traced.named("pivot stage")[0] == {
        "agentsaga.run_id": RUN, "agentsaga.pivot.plan_hash": record.plan_hash,
        "agentsaga.pivot.staged": 1, "agentsaga.pivot.commit": 1,
        "agentsaga.irreversible_before_pivot": 0}


def test_a_plan_is_not_staged_over_an_unknown_step(service: SagaService, ledger: str) -> None:
    service.begin_run(RUN)
    add_fault(ledger, "create_ticket", "unknown_after_commit")
    add_fault(ledger, "create_ticket", "hide_lookups", times=5)
    assert service.dispatch(RUN, "create_ticket", {"summary": "s", "order_id": "1"}).outcome == (
        "UNKNOWN")
    with pytest.raises(PivotError, match="step 0 \\(create_ticket\\) has an unknown outcome"):
        service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    assert service.saga_log.require_run(RUN).pivot is None


@pytest.mark.parametrize(("plan", "problem"), [
    ([{"tool": "search_orders", "args": {"order_id": "1"}}], "search_orders is pure"),
    ([{"args": EMAIL}], "commit step 0: expected"),
    ([{"tool": "send_email", "args": "x"}], "commit step 0: expected"),
])
def test_a_bad_commit_plan_is_refused(service: SagaService, plan: list[dict[str, object]],
                                      problem: str) -> None:
    service.begin_run(RUN)
    with pytest.raises(InvalidArguments, match=problem):
        service.reach_pivot(RUN, plan)
    assert service.saga_log.require_run(RUN).pivot is None


def test_a_run_has_one_pivot_and_an_ended_run_none(
        service: SagaService, operator_log: OperatorStore) -> None:
    service.begin_run(RUN)
    staged = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    record_decision(operator_log, RUN, staged.plan_hash, "Approved", "alice")
    with pytest.raises(PivotError, match=re.escape(
            f"run {RUN!r} already passed its pivot (Approved); a run has a single pivot")):
        service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    service.end_run(RUN, "Failed")
    with pytest.raises(RunEnded, match=re.escape(
            f"run {RUN!r} has ended (failed); it has no pivot to reach")):
        service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])


def test_the_plan_shown_to_the_approver_is_whole(
        service: SagaService, operator_log: OperatorStore) -> None:
    """`status.pivot` and the ReachPivot answer: every step, done (with its status) or to
    come, and every commit step's arguments whole, up to the largest plan a person is asked to
    review (MAX_COMMIT_STEPS steps, MAX_REVIEW_BYTES as shown): nothing cut, nothing left out."""
    service.begin_run(RUN)
    ticket = service.dispatch(RUN, "create_ticket", {"summary": "s", "order_id": "1"})
    longest = _email(MAX_REVIEW_BYTES - 20_000)
    plan = [{"tool": "send_email", "args": longest}]
    plan += [{"tool": "send_email", "args": {"to": "c@example.com", "body": str(n)}}
             for n in range(MAX_COMMIT_STEPS - 1)]
    record = service.reach_pivot(RUN, plan)
    out = shown(record)
    assert set(out) == {"state", "planHash", "stagedAt", "steps", "commit"}
    assert (out["state"], out["planHash"], out["stagedAt"]) == (
        "AwaitingApproval", record.plan_hash, record.staged_at)
    assert out["steps"] == [{"step": 0, "tool": "create_ticket", "class": "compensatable",
                             "status": "CONFIRMED", "audience": ["support_team"],
                             "externalRef": ticket.external_ref}]
    assert [step["args"] for step in out["commit"]] == [step["args"] for step in plan]
    assert out["commit"][0] == {"tool": "send_email", "class": "irreversible",
                                "audience": ["customer"], "args": longest,
                                "argsDigest": record.commit[0]["argsDigest"]}
    assert len(canonical(out).encode()) <= MAX_REVIEW_BYTES
    decided = record_decision(operator_log, RUN, record.plan_hash, "Rejected", "bob",
                              "too long")
    assert {k: v for k, v in shown(decided).items() if k not in ("steps", "commit")} == {
        "state": "Rejected", "planHash": record.plan_hash, "stagedAt": record.staged_at,
        "decision": "Rejected", "decidedBy": "bob", "decidedAt": decided.decided_at,
        "reason": "too long"}


@pytest.mark.parametrize(("plan", "says"), [
    ([{"tool": "send_email", "args": {"to": "c@example.com", "body": str(n)}}
      for n in range(MAX_COMMIT_STEPS + 1)],
     f"the plan has {MAX_COMMIT_STEPS + 1} commit steps; a person reviews at most "
     f"{MAX_COMMIT_STEPS} in one plan: too large to review"),
    ([{"tool": "send_email", "args": _email(MAX_REVIEW_BYTES // 2)}] * 2,
     f"as a person reviews it (the steps done so far and the commit steps' arguments, whole); "
     f"the limit is {MAX_REVIEW_BYTES} bytes: too large to review"),
])
def test_a_plan_too_large_to_review_is_refused_and_nothing_is_staged(
        service: SagaService, plan: list[dict[str, object]], says: str) -> None:
    service.begin_run(RUN)
    with pytest.raises(InvalidArguments, match=re.escape(says)) as refused:
        service.reach_pivot(RUN, plan)
    assert "it was not staged and nothing was written" in str(refused.value)
    run = service.saga_log.require_run(RUN)
    assert (run.pivot, run.state) == (None, "running")


def test_a_failed_step_is_staged_as_it_is_and_commit_steps_are_typed_as_their_calls(
        service: SagaService, ledger: str) -> None:
    """A step that made no effect shows an empty externalRef; a commit step whose arguments its
    call would refuse (none given, a wrong type, the harness's key) is refused at staging, so an
    approved plan never holds a step that cannot run; the run's digest key is 32 random bytes,
    base64url."""
    service.begin_run(RUN)
    add_fault(ledger, "create_ticket", "reject")
    assert service.dispatch(RUN, "create_ticket", {"summary": "s", "order_id": "1"}).outcome == (
        "FAILED")
    receipt = {"customer_id": "c", "amount": 5, "receipt": True}
    for step, says in (({"tool": "create_draft"}, "argument 'body' is missing"),
                       ({"tool": "send_email", "args": {"to": 5, "body": "b"}},
                        "argument 'to' must be a string"),
                       ({"tool": "capture_charge",
                         "args": {"charge_ref": "C-1", "idempotency_key": "mine"}},
                        "idempotency_key is set by the harness")):
        with pytest.raises(InvalidArguments) as refused:
            service.reach_pivot(RUN, [{"tool": "charge_card", "args": receipt}, step])
        assert str(refused.value).startswith("commit step 1: ")
        assert says in str(refused.value) and "Nothing was staged" in str(refused.value)
        assert service.saga_log.require_run(RUN).pivot is None
    record = service.reach_pivot(RUN, [{"tool": "create_draft", "args": {"body": "b"}},
                                       {"tool": "charge_card", "args": receipt}])
    assert record.staged == [{"step": 0, "tool": "create_ticket", "class": "compensatable",
                              "status": "FAILED", "audience": ["support_team"],
                              "externalRef": ""}]
    assert record.commit == [{"tool": "create_draft", "args": {"body": "b"},
                              "class": "reversible", "audience": ["agent"],
                              "argsDigest": args_digest({"body": "b"}, record.digest_key)},
                             {"tool": "charge_card", "args": receipt, "class": "compensatable",
                              "audience": ["customer"],  # R9: from the step's own arguments
                              "argsDigest": args_digest(receipt, record.digest_key)}]
    assert len(base64.urlsafe_b64decode(record.digest_key)) == 32
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}=", record.digest_key)


def test_the_canonical_form_sorts_keys_and_writes_any_value_as_text() -> None:
    """What plan hashes and argument digests are taken over: compact, sorted, and a value that
    JSON has no type for (a Python caller's Decimal or datetime) as its text."""
    value = {"b": Decimal("1.50"), "a": [1, "x"], "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)}
    assert canonical(value) == '{"a":[1,"x"],"at":"2026-01-02 03:04:05+00:00","b":"1.50"}'


def test_the_staged_plan_is_returned_as_stored_with_card_numbers_masked_and_nothing_else(
        service: SagaService) -> None:
    """The approver sees what they approve: a `Token ...` or a `password=...` the email would
    carry is shown as it is; only the card number is masked, to its last four and a digest of
    the whole number keyed with the run's digest key."""
    service.begin_run(RUN)
    body = ("We refunded card 4242 4242 4242 4242. Token evil.example/claim, "
            "password=hunter2, account 5555555555554444")
    card = {"to": "customer@example.com", "body": body}
    record = service.reach_pivot(RUN, [{"tool": "send_email", "args": card}])
    visa = card_digest("4242424242424242", record.digest_key)
    mastercard = card_digest("5555555555554444", record.digest_key)
    assert record.commit[0]["args"] == {
        "to": "customer@example.com",
        "body": f"We refunded card [card ****4242 #{visa}]. Token evil.example/claim, "
                f"password=hunter2, account [card ****4444 #{mastercard}]"}
    assert record == service.saga_log.require_run(RUN).pivot
    assert record.commit[0]["argsDigest"] == args_digest(card, record.digest_key)  # raw args
