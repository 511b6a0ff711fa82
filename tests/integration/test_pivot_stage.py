"""Staging the pivot (R10) in the service itself: the record the approver sees, and each
reason a plan cannot be staged, with the log left as it was."""

from __future__ import annotations

import pytest

from agentsaga.errors import InvalidArguments, PivotError, RunEnded
from agentsaga.pivot import args_digest, plan_hash, record_decision
from agentsaga.service import SagaService
from sagatest.ledger_tools import add_fault

RUN = "stage-run"
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


@pytest.fixture
def service(ledger_service: SagaService) -> SagaService:
    return ledger_service


def test_the_staged_record_is_what_the_approver_sees(service: SagaService) -> None:
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
    assert record.plan_hash == plan_hash(staged, commit) and record.staged_at
    assert record.irreversible_before_pivot == 0
    run = service.saga_log.require_run(RUN)
    assert run.state == "awaiting_approval" and run.pivot == record


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


def test_a_run_has_one_pivot_and_an_ended_run_none(service: SagaService) -> None:
    service.begin_run(RUN)
    staged = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    record_decision(service.saga_log, RUN, staged.plan_hash, "Approved", "alice")
    with pytest.raises(PivotError, match="already passed its pivot \\(Approved\\)"):
        service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    service.end_run(RUN, "Failed")
    with pytest.raises(RunEnded, match="has ended"):
        service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
