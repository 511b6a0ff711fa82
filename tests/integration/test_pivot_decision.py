"""The human decision at the pivot (R10) in-process: what is recorded for Approved and for
Rejected, each refusal with the log unchanged, and waiting for the decision."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest

from agentsaga import step_key
from agentsaga.calls import DispatchResult
from agentsaga.errors import PivotError
from agentsaga.saga.pivot import await_decision, record_decision
from agentsaga.saga.resolution import unwind_run
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import (
    CompensationStatus,
    CorrectionState,
    DispatchOutcome,
    PivotState,
    RunState,
)
from agentsaga.store import PivotRecord, Run, SagaLog, roles
from agentsaga.store.connections import with_user
from agentsaga.store.interfaces import OperatorStore
from sagatest import ledger_tools
from sagatest.ledger_tools import effects
from sagatest.traced import Traced

RUN = "decision-run"
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


@pytest.fixture
def service(ledger_service: SagaService) -> SagaService:
    return ledger_service


def staged(service: SagaService) -> PivotRecord:
    service.begin_run(RUN)
    service.dispatch(RUN, "create_ticket", {"summary": "s", "order_id": "1"})
    return service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])


@pytest.mark.parametrize(("decision", "run_state"), [("Approved", RunState.COMMITTING),
                                                     ("Rejected", RunState.UNWINDING)])
def test_the_decision_is_recorded_with_who_when_and_why(
        service: SagaService, decision: str, run_state: RunState, traced: Traced,
        operator_log: OperatorStore) -> None:
    record = staged(service)
    decided = record_decision(operator_log, RUN, record.plan_hash, decision, "alice",
                              "checked the plan")
    assert (decided.state, decided.decision, decided.decided_by, decided.reason) == (
        PivotState(decision), decision, "alice", "checked the plan")
    assert (decided.plan_hash, decided.staged, decided.commit) == (
        record.plan_hash, record.staged, record.commit)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", decided.decided_at)
    run = service.saga_log.require_run(RUN)
    assert (run.pivot, run.state) == (decided, run_state)
    [span] = traced.named("pivot decision")
    assert (span["agentsaga.run_id"], span["agentsaga.pivot.plan_hash"],
            span["agentsaga.pivot.decision"]) == (RUN, record.plan_hash, decision)


@pytest.mark.parametrize(("decision", "approver", "problem"), [
    ("approved", "alice", "decision 'approved': use Approved or Rejected"),
    ("AwaitingApproval", "alice", "decision 'AwaitingApproval': use Approved or Rejected"),
    ("Approved", "", "the approval names no approver"),
])
def test_a_malformed_decision_is_refused_and_nothing_recorded(
        service: SagaService, decision: str, approver: str, problem: str,
        operator_log: OperatorStore) -> None:
    record = staged(service)
    with pytest.raises(PivotError, match=f"^{re.escape(problem)}$"):
        record_decision(operator_log, RUN, record.plan_hash, decision, approver)
    run = service.saga_log.require_run(RUN)
    assert (run.pivot, run.state) == (record, RunState.AWAITING_APPROVAL)


def test_a_stale_hash_is_refused_and_nothing_recorded(
        service: SagaService, operator_log: OperatorStore) -> None:
    record = staged(service)
    with pytest.raises(PivotError, match=re.escape(
            f"stale approval: plan hash 'abc' is not the staged plan {record.plan_hash!r}")):
        record_decision(operator_log, RUN, "abc", "Approved", "alice")
    assert service.saga_log.require_run(RUN).pivot == record


def test_no_decision_without_a_staged_plan_and_none_twice(
        service: SagaService, operator_log: OperatorStore) -> None:
    service.begin_run(RUN)
    with pytest.raises(PivotError, match=re.escape(
            f"run {RUN!r} is not awaiting approval (no staged plan)")):
        record_decision(operator_log, RUN, "abc", "Approved", "alice")
    record = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    first = record_decision(operator_log, RUN, record.plan_hash, "Rejected", "bob", "no")
    with pytest.raises(PivotError, match=re.escape(
            f"run {RUN!r} is not awaiting approval (Rejected)")):
        record_decision(operator_log, RUN, record.plan_hash, "Approved", "alice")
    assert service.saga_log.require_run(RUN).pivot == first


def test_waiting_for_the_decision(service: SagaService, operator_log: OperatorStore) -> None:
    service.begin_run(RUN)
    assert await_decision(service.saga_log, RUN, timeout=0.0) is None  # nothing staged
    record = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    undecided = await_decision(service.saga_log, RUN, timeout=0.0)
    assert undecided == record and not undecided.decided  # the timeout passed: as it is
    decided = record_decision(operator_log, RUN, record.plan_hash, "Approved", "alice")
    assert await_decision(service.saga_log, RUN, timeout=60.0) == decided  # no wait for it


NS = "shop"
LONG = 120.0
"""A wait's timeout and its re-read interval in the tests below: far longer than each test
takes, so that a second read of the run can only have been caused by the announcement."""


@dataclass
class Shop:
    """A sidecar of namespace `shop` on its own credential, which counts its reads of the run,
    and the operator on its own."""

    service: SagaService
    operator: SagaLog
    reads: list[str]
    dsn: str

    @property
    def run_id(self) -> str:
        return f"{NS}/{RUN}"

    def stage(self) -> PivotRecord:
        self.service.begin_run(RUN)
        return self.service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])

    def wait(self, timeout: float = LONG,
             gone: Callable[[], bool] = lambda: False) -> Callable[[], PivotRecord | None]:
        """Start a wait in a thread; the returned function joins it and gives its answer."""
        answer: list[PivotRecord | None] = []
        waiter = threading.Thread(target=lambda: answer.append(await_decision(
            self.service.saga_log, self.run_id, timeout, gone=gone, recheck_s=LONG)))
        waiter.start()

        def joined() -> PivotRecord | None:
            waiter.join(60.0)
            assert not waiter.is_alive(), "the wait was not woken"
            return answer[0]
        return joined

    def until_waiting(self) -> None:
        """Until the sidecar's credential LISTENs (seen by Postgres) and the wait read its run
        once (after the LISTEN: a decision recorded before it would be seen by that read)."""
        role = roles.namespace_role(NS, "sidecar")
        deadline = time.monotonic() + 30.0
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE usename = %s"
                    " AND query = 'LISTEN agentsaga_decisions'", (role,)).fetchone() != (1,) \
                    or len(self.reads) < 1:
                assert time.monotonic() < deadline, "the wait never started listening"
                time.sleep(0.01)


@pytest.fixture
def shop(pg: str, ledger: str) -> Iterator[Shop]:
    with psycopg.connect(pg) as conn:
        roles.provision(conn, NS)
    sidecar = SagaLog(with_user(pg, roles.namespace_role(NS, "sidecar")), min_size=1,
                      max_size=2).open(migrate=False)
    operator = SagaLog(with_user(pg, roles.OPERATOR), min_size=1, max_size=1).open(
        migrate=False)
    service = SagaService(sidecar, ledger_tools.build_registry(),
                          Settings(recheck_pause_s=0.01, pod_namespace=NS),
                          sleep=lambda _: None)
    try:
        yield Shop(service, operator, [], pg)
    finally:
        sidecar.close()
        operator.close()


def _counting(shop: Shop, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, each read of a run by the sidecar's waits is in `shop.reads`."""
    require_run = shop.service.saga_log.require_run

    def counted(run_id: str) -> Run:
        shop.reads.append(run_id)
        return require_run(run_id)

    monkeypatch.setattr(shop.service.saga_log, "require_run", counted)


def test_a_decision_the_operator_records_wakes_the_waiting_sidecar(
        shop: Shop, monkeypatch: pytest.MonkeyPatch) -> None:
    """Delivered by LISTEN: the wait reads its run when it starts and once more when the
    operator's decision is announced, no poll between (its re-read interval and its timeout
    are far longer than the test)."""
    record = shop.stage()
    _counting(shop, monkeypatch)
    answer = shop.wait()
    shop.until_waiting()
    decided = record_decision(shop.operator, shop.run_id, record.plan_hash, "Rejected", "bob",
                              "wrong amount")
    assert answer() == decided and decided.state == PivotState.REJECTED
    assert shop.reads == [shop.run_id] * 2


def test_a_decision_recorded_before_the_wait_is_seen_by_its_first_read(
        shop: Shop, monkeypatch: pytest.MonkeyPatch) -> None:
    record = shop.stage()
    decided = record_decision(shop.operator, shop.run_id, record.plan_hash, "Approved", "alice")
    _counting(shop, monkeypatch)
    assert shop.wait()() == decided
    assert shop.reads == [shop.run_id]


def test_the_announcement_tells_another_namespace_nothing(shop: Shop, pg: str) -> None:
    """Any role may LISTEN on any channel: the payload is the decided plan's hash only, and the
    run it is of stays invisible to another namespace's credential."""
    record = shop.stage()
    with psycopg.connect(pg) as conn:
        roles.provision(conn, "other")
    other = with_user(pg, roles.namespace_role("other", "sidecar"))
    with psycopg.connect(other, autocommit=True) as listener:
        listener.execute("LISTEN agentsaga_decisions")
        record_decision(shop.operator, shop.run_id, record.plan_hash, "Approved", "alice")
        [note] = list(listener.notifies(timeout=10.0, stop_after=1))
        assert note.payload == record.plan_hash
        assert NS not in note.payload and RUN not in note.payload
        assert listener.execute("SELECT count(*) FROM saga_runs").fetchone() == (0,)


def test_the_wait_ends_at_its_timeout_or_when_its_caller_is_gone(
        shop: Shop, monkeypatch: pytest.MonkeyPatch) -> None:
    record = shop.stage()
    _counting(shop, monkeypatch)
    started = time.monotonic()
    undecided = await_decision(shop.service.saga_log, shop.run_id, 0.3, recheck_s=LONG)
    assert time.monotonic() - started >= 0.3
    assert undecided == record and not undecided.decided
    assert shop.reads == [shop.run_id] * 2  # when it started and at its end, nothing between
    shop.reads.clear()
    left: list[bool] = []
    answer = shop.wait(gone=lambda: bool(left))
    shop.until_waiting()
    left.append(True)
    assert answer() == record
    assert shop.reads == [shop.run_id] * 2


def test_the_service_waits_at_most_the_configured_cap(shop: Shop) -> None:
    """AGENTSAGA_AWAIT_DECISION_MAX_S caps whatever timeout a wait asks for."""
    record = shop.stage()
    capped = SagaService(shop.service.saga_log, shop.service.registry,
                         Settings(recheck_pause_s=0.01, await_decision_max_s=0.3,
                                  pod_namespace=NS))
    started = time.monotonic()
    assert capped.await_decision(RUN, timeout=86400.0) == record
    assert 0.3 <= time.monotonic() - started < LONG
    assert capped.await_decision(RUN, timeout=-5.0) == record  # a negative timeout: no wait


def test_an_approved_irreversible_step_is_queued_for_a_person_on_unwind_once(
        service: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    """R9 after R10: what the customer read cannot be compensated; the unwind queues its
    pre-written correction (Proposed, for the customer) and marks the step QUEUED, once."""
    record = staged(service)
    record_decision(operator_log, RUN, record.plan_hash, "Approved", "alice")
    sent = service.dispatch(RUN, "send_email", EMAIL)
    assert sent.outcome == "CONFIRMED"
    first = unwind_run(service.saga_log, service.registry, RUN, "job", recheck_pause_s=0.01)
    queued = {"step_idx": 1, "tool": "send_email", "state": "Proposed",
              "audience": ["customer"]}
    assert first.queued == [queued]
    assert [c["tool"] for c in first.compensated] == ["create_ticket"]  # the older step too
    step = service.saga_log.step(RUN, 1)
    assert step is not None and step.comp_status == CompensationStatus.QUEUED
    [correction] = [c for c in service.saga_log.corrections(RUN) if c.step_idx == 1]
    assert (correction.state, correction.audience, correction.tool) == (
        CorrectionState.PROPOSED, ["customer"], "send_email")
    again = unwind_run(service.saga_log, service.registry, RUN, "job2", recheck_pause_s=0.01)
    assert again.queued == [queued]
    assert [c for c in service.saga_log.corrections(RUN) if c.step_idx == 1] == [correction]
    assert len(effects(ledger, "email")) == 1  # nothing sent again, nothing "undone"


def test_each_approved_commit_step_runs_once(
        service: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    """R10: a plan that sends the same email twice admits exactly two sends, each carrying out
    its own commit step (recorded on its row); a third is refused, naming the step it repeats."""
    service.begin_run(RUN)
    record = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}] * 2)
    approved = record_decision(operator_log, RUN, record.plan_hash, "Approved", "alice")
    assert approved.reason == ""  # none given
    sent = [service.dispatch(RUN, "send_email", EMAIL) for _ in range(2)]
    assert [(s.outcome, s.step_idx) for s in sent] == [("CONFIRMED", 0), ("CONFIRMED", 1)]
    assert service.saga_log.commits_taken(RUN) == {0, 1}
    third = service.dispatch(RUN, "send_email", EMAIL)
    assert third.outcome == "NEEDS_APPROVAL"
    assert third.message == (
        f"send_email with these arguments already ran: it is commit step 1 of the approved "
        f"plan {record.plan_hash}, and each approved step runs once. Its outcome is in the "
        "saga log (GetRun); do not call it again")
    with psycopg.connect(ledger) as conn:
        assert conn.execute("SELECT step_idx, commit_index, after_pivot, status FROM saga_log"
                            " WHERE run_id = %s ORDER BY step_idx", (RUN,)).fetchall() == [
            (0, 0, True, "CONFIRMED"), (1, 1, True, "CONFIRMED")]
    assert len(effects(ledger, "email")) == 2


def test_an_approved_step_called_twice_is_refused_naming_its_commit_step(
        service: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    service.begin_run(RUN)
    record = service.reach_pivot(RUN, [{"tool": "send_email", "args": EMAIL}])
    record_decision(operator_log, RUN, record.plan_hash, "Approved", "alice")
    assert service.dispatch(RUN, "send_email", EMAIL).outcome == "CONFIRMED"
    again = service.dispatch(RUN, "send_email", EMAIL)
    assert again == DispatchResult(
        DispatchOutcome.NEEDS_APPROVAL, 1, step_key(RUN, 1, "send_email"),
        message=f"send_email with these arguments already ran: it is commit step 0 of the "
                f"approved plan {record.plan_hash}, and each approved step runs once. Its "
                "outcome is in the saga log (GetRun); do not call it again")
    assert len(effects(ledger, "email")) == 1


def test_a_plan_changed_after_it_was_staged_is_not_decided(
        service: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    """The saga log refuses any change to a staged plan (migration 019), its owner's too; one
    made behind the trigger's back (a superuser with triggers off swapped a commit step's
    digest) no longer hashes to its planHash: nothing is recorded, whatever hash the approver
    sends."""
    record = staged(service)
    swap = ("UPDATE saga_runs SET pivot = jsonb_set(pivot, '{commit,0,argsDigest}', '\"0000\"')"
            " WHERE run_id = %s")
    with psycopg.connect(ledger) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege,
                                                        match="cannot be changed"):
        conn.execute(swap, (RUN,))
    with psycopg.connect(ledger) as conn:
        conn.execute("SET session_replication_role = replica")  # no triggers fire
        conn.execute(swap, (RUN,))
    with pytest.raises(PivotError) as refused:
        record_decision(operator_log, RUN, record.plan_hash, "Approved", "alice")
    assert str(refused.value) == (
        f"run {RUN!r}: the stored plan does not hash to its planHash (it was changed after it "
        "was staged); nothing was recorded. Stage the plan again.")
    run = service.saga_log.require_run(RUN)
    assert run.state == RunState.AWAITING_APPROVAL and run.pivot is not None
    assert run.pivot.state == PivotState.AWAITING_APPROVAL and not run.pivot.decided_by


def test_of_two_approvers_deciding_at_once_one_decision_is_recorded(
        service: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    """Both read the plan as awaiting approval and write at once (their writes held back by a
    lock on the run's row until both wait for it): one decision is recorded, the other approver
    is told that nothing of theirs was."""
    record = staged(service)
    outcomes: dict[str, PivotRecord | PivotError] = {}

    def decide(decision: str, approver: str) -> None:
        try:
            outcomes[approver] = record_decision(operator_log, RUN, record.plan_hash,
                                                 decision, approver)
        except PivotError as exc:
            outcomes[approver] = exc

    with psycopg.connect(ledger) as holder:
        holder.execute("SELECT 1 FROM saga_runs WHERE run_id = %s FOR UPDATE", (RUN,))
        approvers = [threading.Thread(target=decide, args=("Approved", "alice")),
                     threading.Thread(target=decide, args=("Rejected", "bob"))]
        for thread in approvers:
            thread.start()
        deadline = time.monotonic() + 30.0
        with psycopg.connect(ledger, autocommit=True) as watcher:
            while watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                    " AND query LIKE 'UPDATE saga_runs SET pivot_decision%%'",
            ).fetchone() != (2,):
                assert time.monotonic() < deadline, "the approvers' writes never waited"
                time.sleep(0.01)
        holder.rollback()
    for thread in approvers:
        thread.join(timeout=30.0)
        assert not thread.is_alive()
    [winner] = [who for who, out in outcomes.items() if isinstance(out, PivotRecord)]
    [loser] = [out for out in outcomes.values() if isinstance(out, PivotError)]
    assert str(loser) == (f"run {RUN!r}: the plan changed or was decided meanwhile; nothing "
                          "was recorded")
    stored = service.saga_log.require_run(RUN).pivot
    assert stored is not None and stored == outcomes[winner] and stored.decided_by == winner


def test_no_side_effect_runs_while_the_plan_waits_for_a_person(service: SagaService,
                                                               ledger: str) -> None:
    """R10: between the staging and the decision, every side-effecting call is refused, with
    no row written and nothing called; a pure call still runs."""
    record = staged(service)
    for tool, args in (("create_ticket", {"summary": "t", "order_id": "2"}),
                       ("send_email", EMAIL)):
        out = service.dispatch(RUN, tool, args)
        assert out == DispatchResult(
            DispatchOutcome.NEEDS_APPROVAL, 1, step_key(RUN, 1, tool),
            message=f"the run is waiting for approval of plan {record.plan_hash}; no side "
                    "effects until a human decides")
    assert service.dispatch(RUN, "search_orders", {"order_id": "2"}).outcome == "CONFIRMED"
    assert [s.tool for s in service.saga_log.steps(RUN)] == ["create_ticket"]
    assert len(effects(ledger, "ticket")) == 1 and effects(ledger, "email") == []


def test_an_approved_tool_called_with_other_arguments_is_refused(
        service: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    """R10: what was approved is the tool with its exact arguments (their digest); the same
    tool with other arguments, or another tool, is not in the plan."""
    record = staged(service)
    record_decision(operator_log, RUN, record.plan_hash, "Approved", "alice")
    other = {**EMAIL, "body": "Your refund was declined."}
    refused = service.dispatch(RUN, "send_email", other)
    assert refused == DispatchResult(
        DispatchOutcome.NEEDS_APPROVAL, 1, step_key(RUN, 1, "send_email"),
        message=f"send_email with these arguments is not in the approved plan "
                f"{record.plan_hash}; a changed plan needs a new approval")
    assert effects(ledger, "email") == []
    sent = service.dispatch(RUN, "send_email", EMAIL)
    assert (sent.outcome, sent.step_idx) == ("CONFIRMED", 1)
    assert [e["body"]["body"] for e in effects(ledger, "email")] == [EMAIL["body"]]
