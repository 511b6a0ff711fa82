"""`Reconciler.settle_many`: reconcile at scale across runs, batched lookups, one re-check."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime

import psycopg
import pytest

from agentsaga import NO_LOOKUP, Compensation, Registry
from agentsaga.errors import Fenced
from agentsaga.keys import step_key
from agentsaga.saga.reconcile import Reconciler, settle_command
from agentsaga.saga.registry import Effect, LookupContext
from agentsaga.states import RunState, StepStatus
from agentsaga.store import SagaLog
from sagatest.traced import Traced


class FakeSystem:
    """A real system's effects by key, with every batched lookup recorded."""

    def __init__(self, present: set[str], late: frozenset[str] = frozenset(),
                 reveal_after: int = 0, fail: bool = False) -> None:
        self.present, self.late, self.fail = set(present), set(late), fail
        self.reveal_after = reveal_after
        self.batches: list[list[str]] = []

    def lookup(self, key: str) -> Effect | None:
        return self.lookup_many([key]).get(key)

    def lookup_many(self, keys: Sequence[str]) -> dict[str, Effect]:
        self.batches.append(list(keys))
        if self.fail:
            raise ConnectionError("search is down")
        found = {k: Effect(f"ref-{k[:6]}", {"id": f"ref-{k[:6]}"}) for k in keys
                 if k in self.present}
        if len(self.batches) == self.reveal_after:  # the lagging index catches up
            self.present |= self.late
        return found


def registry_for(system: FakeSystem) -> Registry:
    registry = Registry()

    def charge(idempotency_key: str, amount: int = 0) -> dict[str, str]:
        return {"id": "x"}

    registry.register(charge, cls="compensatable",
                      compensate=lambda args, key: Compensation("refund", {"key": key}),
                      lookup=system.lookup, lookup_many=system.lookup_many)
    return registry


def seed(dsn: str, count: int) -> list[str]:
    runs = [f"run-{i}" for i in range(count)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for r in runs:
            conn.execute("INSERT INTO saga_runs (run_id) VALUES (%s)", (r,))
            conn.execute(
                "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key,"
                " args, status, writer_epoch) VALUES (%s, 0, 'charge', 'compensatable', %s,"
                " '{}', 'UNKNOWN', 1)", (r, step_key(r, 0, "charge")))
    return runs


def statuses(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT run_id, status FROM saga_log").fetchall())


def test_settles_many_runs_in_batches_with_one_recheck(pg: str, traced: Traced,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    runs = seed(pg, 25)
    keys = [step_key(r, 0, "charge") for r in runs]
    system = FakeSystem(present=set(keys[:20]), late=frozenset({keys[20]}), reveal_after=3)
    pauses: list[float] = []
    with SagaLog(pg).open(migrate=False) as saga_log:
        reconciler = Reconciler(saga_log, registry_for(system), 0.5, sleep=pauses.append,
                                batch=10)
        steps = saga_log.unsettled()
        with caplog.at_level(logging.INFO, logger="agentsaga.saga.reconcile"):
            out = reconciler.settle_many(steps, {s.run_id: 1 for s in steps})
    assert [o.step.run_id for o in out] == [s.run_id for s in steps]
    assert [len(b) for b in system.batches] == [10, 10, 5, 5]  # 3 first, one re-check of 5
    assert pauses == [0.5]
    assert [r.getMessage() for r in caplog.records if r.name == "agentsaga.saga.reconcile"] == [
        "5 lookups empty, re-checking after 0.5s"]
    truth = statuses(pg)
    assert [truth[r] for r in runs] == ["CONFIRMED"] * 21 + ["NOT_EXECUTED"] * 4
    findings = {o.step.run_id: o.finding for o in out}
    assert findings["run-0"] == "found" and findings["run-20"] == "found_on_recheck"
    assert findings["run-24"] == "not_found"
    [absent] = [o.step for o in out if o.step.run_id == "run-24"]
    assert absent.error == "not found by key after re-check"  # why, in the row
    [span] = traced.named("reconcile")  # one span over all 25 rows, one per round of lookups
    assert (span["agentsaga.reconcile.keys"], span["agentsaga.reconcile.rechecked"]) == (25, True)
    assert [(r["agentsaga.reconcile.keys"], r["agentsaga.reconcile.attempt"],
             r["agentsaga.reconcile.recheck"], r["agentsaga.reconcile.found"])
            for r in traced.named("reconcile lookup")] == [(25, 1, False, 20), (5, 2, True, 1)]


@pytest.mark.allow_effect_warnings("the batched lookup it provokes fails")
def test_a_failed_batch_leaves_its_rows_unknown(pg: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    seed(pg, 3)
    system = FakeSystem(present=set(), fail=True)
    with SagaLog(pg).open(migrate=False) as saga_log, caplog.at_level(logging.WARNING):
        steps = saga_log.unsettled()
        out = Reconciler(saga_log, registry_for(system), 0).settle_many(steps, 1)
    [warned] = [r for r in caplog.records if r.name == "agentsaga.saga.reconcile"]
    assert warned.getMessage() == "lookup of 3 charge keys failed: search is down"
    assert warned.tool == "charge"  # type: ignore[attr-defined]
    assert {o.finding for o in out} == {"lookup_failed"}
    assert set(statuses(pg).values()) == {"UNKNOWN"}


def test_a_stale_epoch_is_fenced(pg: str) -> None:
    runs = seed(pg, 1)
    system = FakeSystem(present={step_key(runs[0], 0, "charge")})
    with SagaLog(pg).open(migrate=False) as saga_log:
        saga_log.adopt(runs[0], "someone-else")
        with pytest.raises(Fenced):
            Reconciler(saga_log, registry_for(system), 0).settle_many(saga_log.unsettled(), 1)
    assert statuses(pg) == {runs[0]: "UNKNOWN"}


@pytest.mark.allow_effect_warnings("the batched lookup it provokes fails")
def test_a_row_settled_meanwhile_is_reported_as_it_now_is(pg: str) -> None:
    """The rows were read UNKNOWN; before reconcile writes, a person settles one of them: that
    row is reported as now settled (not overwritten), the other keeps why it stays UNKNOWN."""
    runs = seed(pg, 2)
    system = FakeSystem(present=set(), fail=True)
    with SagaLog(pg).open(migrate=False) as saga_log:
        steps = saga_log.unsettled()
        settled = saga_log.record_outcome(runs[0], 1, 0, StepStatus.CONFIRMED,
                                          external_ref="T-9")
        out = Reconciler(saga_log, registry_for(system), 0).settle_many(steps, 1)
        kept = saga_log.step(runs[1], 0)
    assert [(o.step, o.finding, o.was) for o in out[:1]] == [
        (settled, "already_settled", StepStatus.UNKNOWN)]
    why = "lookup failed: ConnectionError: search is down"
    assert (out[1].finding, out[1].detail, out[1].step, out[1].was) == (
        "lookup_failed", why, kept, StepStatus.UNKNOWN)
    assert kept is not None and (kept.status, kept.error) == ("UNKNOWN", why)
    assert statuses(pg) == {runs[0]: "CONFIRMED", runs[1]: "UNKNOWN"}


@pytest.mark.allow_effect_warnings("the re-opened row is warned about")
def test_a_run_reconciled_reopens_a_row_whose_effect_a_late_call_saw(
        pg: str, traced: Traced, caplog: pytest.LogCaptureFixture) -> None:
    """settle_rows: of two rows settled NOT_EXECUTED, the one whose effect a call (fenced
    meanwhile) observed is re-opened as CONFIRMED with that effect, and a warning says so; the
    run's unsettled row is looked up by key."""
    [run] = seed(pg, 1)
    key = step_key(run, 2, "charge")
    system = FakeSystem(present={key})
    with SagaLog(pg).open(migrate=False) as saga_log:
        saga_log.record_outcome(run, 1, 0, StepStatus.NOT_EXECUTED)
        for idx, status in ((1, StepStatus.NOT_EXECUTED), (2, StepStatus.UNKNOWN)):
            saga_log.record_intent(run, 1, idx, tool="charge", tool_class="compensatable",
                                   key=step_key(run, idx, "charge"), args={},
                                   compensation={"tool": "refund", "args": {}}, audience=[])
            settled = saga_log.record_outcome(run, 1, idx, status)
            assert settled is not None
            if idx == 1:
                saga_log.record_observation(settled, 1, StepStatus.CONFIRMED,
                                            external_ref="ref-late", result={"id": "ref-late"},
                                            error=None)
        with caplog.at_level(logging.WARNING, logger="agentsaga.saga.reconcile"):
            out = Reconciler(saga_log, registry_for(system), 0).settle_rows(run, 1)
        rows = saga_log.steps(run)
    assert [(o.step.step_idx, o.finding, o.detail, o.was) for o in out] == [
        (1, "reopened", "observed ref-late", StepStatus.NOT_EXECUTED),
        (2, "found", "", StepStatus.UNKNOWN)]
    assert [(r.status, r.external_ref, r.result) for r in rows] == [
        (StepStatus.NOT_EXECUTED, None, None),
        (StepStatus.CONFIRMED, "ref-late", {"id": "ref-late"}),
        (StepStatus.CONFIRMED, f"ref-{key[:6]}", {"id": f"ref-{key[:6]}"})]
    [warned] = [r for r in caplog.records if r.name == "agentsaga.saga.reconcile"]
    assert warned.getMessage() == (f"step 1 of {run} was settled NOT_EXECUTED, but a late call "
                                   "observed its effect ref-late: re-opened")
    assert (warned.run_id, warned.step, warned.tool) == (  # type: ignore[attr-defined]
        run, 1, "charge")
    assert [span["agentsaga.run_id"] for span in traced.named("reconcile")] == [run]
    assert [(s["agentsaga.reconcile.keys"], s["agentsaga.reconcile.attempt"])
            for s in traced.named("reconcile lookup")] == [(1, 1)]


def test_a_row_settled_meanwhile_is_not_overwritten_by_what_the_lookup_found(pg: str) -> None:
    """Read UNKNOWN, then settled NOT_EXECUTED by someone else before reconcile writes what it
    found by key: reported as it now is (already settled), the other row CONFIRMED."""
    runs = seed(pg, 2)
    system = FakeSystem(present={step_key(r, 0, "charge") for r in runs})
    with SagaLog(pg).open(migrate=False) as saga_log:
        steps = saga_log.unsettled()
        settled = saga_log.record_outcome(runs[1], 1, 0, StepStatus.NOT_EXECUTED)
        out = Reconciler(saga_log, registry_for(system), 0).settle_many(steps, 1)
    by_run = {o.step.run_id: o for o in out}
    assert (by_run[runs[1]].step, by_run[runs[1]].finding, by_run[runs[1]].was) == (
        settled, "already_settled", StepStatus.UNKNOWN)
    assert by_run[runs[0]].finding == "found"
    assert statuses(pg) == {runs[0]: "CONFIRMED", runs[1]: "NOT_EXECUTED"}


def test_rows_of_two_tools_are_each_looked_up_in_their_own_system(pg: str) -> None:
    """One batch of rows of two tools: each tool's keys go to its own lookup, and only there."""
    runs = seed(pg, 4)
    with psycopg.connect(pg, autocommit=True) as conn:  # runs 2 and 3 called `ticket` instead
        for r in runs[2:]:
            conn.execute("UPDATE saga_log SET tool = 'ticket', idempotency_key = %s"
                         " WHERE run_id = %s", (step_key(r, 0, "ticket"), r))
    charges = {step_key(r, 0, "charge") for r in runs[:2]}
    tickets = {step_key(r, 0, "ticket") for r in runs[2:]}
    payments, desk = FakeSystem(present=charges), FakeSystem(present=tickets)
    registry = registry_for(payments)

    def ticket(idempotency_key: str, summary: str = "") -> dict[str, str]:
        return {"id": "t"}

    registry.register(ticket, cls="compensatable",
                      compensate=lambda args, key: Compensation("close", {"key": key}),
                      lookup=desk.lookup, lookup_many=desk.lookup_many)
    with SagaLog(pg).open(migrate=False) as saga_log:
        reconciler = Reconciler(saga_log, registry, 0.5, sleep=lambda _: None, batch=10)
        steps = saga_log.unsettled()
        out = reconciler.settle_many(steps, {s.run_id: 1 for s in steps})
    assert {o.finding for o in out} == {"found"}
    assert statuses(pg) == dict.fromkeys(runs, "CONFIRMED")
    assert [set(b) for b in payments.batches] == [charges]
    assert [set(b) for b in desk.batches] == [tickets]


def test_an_effect_a_late_call_observed_settles_its_row_without_a_lookup(pg: str) -> None:
    """A call that came back after its writer was fenced recorded what the real system said:
    reconcile believes it before asking anyone (R7)."""
    [run] = seed(pg, 1)
    system = FakeSystem(present=set())
    with SagaLog(pg).open(migrate=False) as saga_log:
        [row] = saga_log.steps(run)
        saga_log.record_observation(row, 1, StepStatus.CONFIRMED, external_ref="ref-late",
                                    result={"id": "ref-late"}, error=None)
        [out] = Reconciler(saga_log, registry_for(system), 0).settle_many([row], {run: 1})
    assert (out.finding, out.step.status, out.step.external_ref, out.step.result) == (
        "observed", StepStatus.CONFIRMED, "ref-late", {"id": "ref-late"})
    assert system.batches == []  # nobody was asked
    assert statuses(pg) == {run: "CONFIRMED"}


def test_a_row_of_a_tool_this_process_does_not_register_stays_unknown_and_says_why(
        pg: str) -> None:
    [run] = seed(pg, 1)
    with SagaLog(pg).open(migrate=False) as saga_log:
        [row] = saga_log.steps(run)
        [out] = Reconciler(saga_log, Registry(), 0).settle_many([row], {run: 1})
    why = "tool 'charge' is not registered in this process"
    assert (out.finding, out.detail, out.step.status, out.step.error) == (
        "no_lookup", why, StepStatus.UNKNOWN, why)
    assert statuses(pg) == {run: "UNKNOWN"}


def test_a_job_leaves_a_row_not_found_yet_unknown_inside_the_deduplication_window(
        pg: str) -> None:
    """settle_many (a Job, an unwind) re-sends nothing: an empty lookup before the effect could
    be visible leaves the row UNKNOWN, even while the system would deduplicate a re-send (only a
    dispatch sending the same arguments again may rely on that)."""
    [run] = seed(pg, 1)
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("UPDATE saga_log SET deadline = now(), visible_within_s = 3600,"
                     " dedupes_for_s = 86400")
    system = FakeSystem(present=set())
    with SagaLog(pg).open(migrate=False) as saga_log:
        [row] = saga_log.steps(run)
        [out] = Reconciler(saga_log, registry_for(system), 0).settle_many([row], 1)
    assert (out.finding, out.step.status) == ("not_yet_certain", StepStatus.UNKNOWN)
    assert out.retry_after_s is not None and out.certain_at is not None
    assert len(system.batches) == 2  # looked up, and re-checked once
    assert statuses(pg) == {run: "UNKNOWN"}


def test_a_row_handed_in_already_settled_is_reported_as_it_is_and_nobody_is_asked(
        pg: str) -> None:
    [run] = seed(pg, 1)
    system = FakeSystem(present=set())
    with SagaLog(pg).open(migrate=False) as saga_log:
        settled = saga_log.record_outcome(run, 1, 0, StepStatus.NOT_EXECUTED)
        assert settled is not None
        [out] = Reconciler(saga_log, registry_for(system), 0).settle_many([settled], 1)
    assert (out.step, out.finding, out.was) == (
        settled, "already_settled", StepStatus.NOT_EXECUTED)
    assert system.batches == []
    assert statuses(pg) == {run: "NOT_EXECUTED"}


def test_a_lookup_by_steps_is_handed_what_the_log_knows_of_each_row(pg: str) -> None:
    """R7 for a lookup that needs more than the key (`lookup_steps`): each row comes with its
    key, its first arguments, when it was intended, its deadline and the effect's id a late
    call saw; the rows it finds are CONFIRMED, the re-check asks again for the others only."""
    runs = seed(pg, 2)
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("UPDATE saga_log SET args = '{\"amount\": 5}', deadline = created_at")
        deadlines: dict[str, datetime] = dict(
            conn.execute("SELECT run_id, deadline FROM saga_log").fetchall())
    seen: list[list[LookupContext]] = []

    def lookup_steps(contexts: Sequence[LookupContext]) -> dict[str, Effect]:
        seen.append(list(contexts))
        return {c.key: Effect(c.external_ref, {"id": c.external_ref}) for c in contexts
                if c.external_ref}

    def charge(idempotency_key: str, amount: int = 0) -> dict[str, str]:
        return {"id": "x"}

    registry = Registry()
    registry.register(charge, cls="compensatable",
                      compensate=lambda args, key: Compensation("refund", {"key": key}),
                      lookup=lambda key: None, lookup_steps=lookup_steps)
    with SagaLog(pg).open(migrate=False) as saga_log:
        rows = [saga_log.steps(r)[0] for r in runs]
        saga_log.record_observation(rows[1], 1, StepStatus.UNKNOWN, external_ref="ch_1",
                                    result=None, error="504 after the charge was created")
        out = Reconciler(saga_log, registry, 0).settle_many(rows, 1)
    contexts = [LookupContext(r.idempotency_key, {"amount": 5}, r.created_at,
                              deadlines[r.run_id], None) for r in rows]
    contexts[1] = dataclasses.replace(contexts[1], external_ref="ch_1")
    assert seen == [contexts, contexts[:1]]
    assert [(o.finding, o.step.status, o.step.external_ref) for o in out] == [
        ("not_found", StepStatus.NOT_EXECUTED, None),
        ("found", StepStatus.CONFIRMED, "ch_1")]


def test_a_row_no_lookup_can_settle_is_handed_to_a_person_once(pg: str) -> None:
    """settle_many (a Job, an unwind) of an UNKNOWN row whose tool declares no lookup: it stays
    UNKNOWN, says who must settle it and how, and is handed to a person (once) under the epoch
    of its own run."""
    [run] = seed(pg, 1)
    registry = Registry()

    def charge(idempotency_key: str, amount: int = 0) -> dict[str, str]:
        return {"id": "x"}

    registry.register(charge, cls="compensatable", lookup=NO_LOOKUP,
                      compensate=lambda args, key: Compensation("refund", {"key": key}))
    why = (f"tool 'charge' declares no lookup: only a person can tell whether step 0 happened;"
           f" record it with `{settle_command(run, 0)}`")
    with SagaLog(pg).open(migrate=False) as saga_log:
        [row] = saga_log.steps(run)
        outs = [Reconciler(saga_log, registry, 0).settle_many([row], {run: 1})[0]
                for _ in range(2)]
        waiting = saga_log.settlements(run, waiting_only=True)
    for out in outs:
        assert (out.finding, out.detail, out.step.status, out.step.error, out.needs_human) == (
            "no_lookup", why, StepStatus.UNKNOWN, why, True)
    assert [(w.step_idx, w.step_key, w.why) for w in waiting] == [
        (0, step_key(run, 0, "charge"), why)]


def test_the_log_names_the_ended_runs_whose_never_happened_step_a_late_call_saw(
        pg: str) -> None:
    """What the operator acts on once a run has ended: a step settled NOT_EXECUTED with a
    CONFIRMED observation. Not an open run (its own reconcile re-opens it), not a call that saw
    no effect, not a step the log holds as CONFIRMED already."""
    runs = seed(pg, 5)
    with SagaLog(pg).open(migrate=False) as saga_log:
        for run, outcome, settled, ended in (
                (runs[0], StepStatus.CONFIRMED, StepStatus.NOT_EXECUTED, True),
                (runs[1], StepStatus.CONFIRMED, StepStatus.NOT_EXECUTED, False),
                (runs[2], StepStatus.UNKNOWN, StepStatus.NOT_EXECUTED, True),
                (runs[3], StepStatus.CONFIRMED, StepStatus.CONFIRMED, True),
                (runs[4], StepStatus.CONFIRMED, StepStatus.NOT_EXECUTED, True)):
            step = saga_log.record_outcome(run, 1, 0, settled)
            assert step is not None
            saga_log.record_observation(step, 1, outcome, external_ref="ref-late",
                                        result={"id": "ref-late"}, error=None)
            if ended:
                saga_log.set_run_state(run, 1, RunState.UNWOUND, end=True)
        assert saga_log.late_effects() == [runs[0], runs[4]]
        assert saga_log.late_effects([runs[1], runs[4]]) == [runs[4]]
        assert saga_log.late_effects([]) == []
