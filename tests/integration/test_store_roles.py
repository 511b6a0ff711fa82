"""Every store method under every role, against one namespace's run: which succeed is exactly
the table below (real Postgres; the roles, grants, row-level security and triggers of
`agentsaga.store.roles` and migration 014). `ok`: it returned and did what it says (a write
wrote, a read found the run); `none`: it returned having found or changed nothing (the rows
are not the role's to see); `refused`: Postgres refused it."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from agentsaga.errors import SagaError
from agentsaga.keys import compensation_key, step_key
from agentsaga.states import (
    CompensationStatus,
    CorrectionState,
    PivotState,
    RunState,
    SettlementOutcome,
    StepStatus,
)
from agentsaga.store import SagaLog, interfaces, roles
from agentsaga.store.connections import with_user
from agentsaga.store.records import Correction, PivotRecord, Step
from agentsaga.store.waits import WAITS

NS = "shop"
RUN, FRESH, OLD = f"{NS}/r", f"{NS}/fresh", f"{NS}/old"
ROLE = {"sidecar": roles.namespace_role(NS, "sidecar"), "job": roles.namespace_role(NS, "job"),
        "operator": roles.OPERATOR}
LONG_AGO = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
FUTURE = datetime.datetime(2999, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture
def world(pg: str) -> str:
    """Namespace `shop` provisioned. Run `shop/r` (epoch 1, bound to a released pod, a plan
    staged): step 0 CONFIRMED compensatable, step 1 UNKNOWN irreversible handed to a person,
    step 2 NOT_EXECUTED, step 3 CONFIRMED irreversible; a Proposed correction of step 0, an
    Approved one of step 1, a Sending one of step 3. Run `shop/fresh` with no step (bound to
    pod-9); run `shop/old`, ended long ago. Written by the migration role."""
    with psycopg.connect(pg) as conn:
        roles.provision(conn, NS)
        conn.execute(
            "INSERT INTO saga_runs (run_id, namespace, owner, pod_uid, released_pod, pivot)"
            " VALUES (%s, %s, 'pod-1', 'pod-1', 'pod-1', '{\"state\": \"AwaitingApproval\","
            " \"planHash\": \"h1\"}')", (RUN, NS))
        conn.execute("INSERT INTO saga_runs (run_id, namespace, pod_uid) VALUES"
                     " (%s, %s, 'pod-9')", (FRESH, NS))
        conn.execute("INSERT INTO saga_runs (run_id, namespace, state, ended_at) VALUES"
                     " (%s, %s, 'succeeded', '2001-01-01')", (OLD, NS))
        for idx, (tool, cls, status) in enumerate([
                ("charge", "compensatable", "CONFIRMED"), ("wire", "irreversible", "UNKNOWN"),
                ("mail", "irreversible", "NOT_EXECUTED"), ("note", "irreversible", "CONFIRMED")]):
            conn.execute(
                "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
                " status, compensation, writer_epoch) VALUES (%s, %s, %s, %s, %s, '{}', %s, %s,"
                " 1)", (RUN, idx, tool, cls, step_key(RUN, idx, tool), status,
                        '{"tool": "refund", "args": {}}' if idx == 0 else None))
        conn.execute("INSERT INTO saga_observations (run_id, step_idx, idempotency_key, outcome,"
                     " writer_epoch) VALUES (%s, 2, %s, 'CONFIRMED', 1)",
                     (RUN, step_key(RUN, 2, "mail")))
        conn.execute("INSERT INTO step_settlements (run_id, step_idx, step_key) VALUES"
                     " (%s, 1, %s)", (RUN, step_key(RUN, 1, "wire")))
        conn.execute("INSERT INTO corrections (run_id, step_idx, tool, audience, rank, state,"
                     " approver) VALUES (%s, 0, 'sorry', '{customer}', 1, 'Proposed', NULL),"
                     " (%s, 1, 'sorry', '{customer}', 1, 'Approved', 'alice'),"
                     " (%s, 3, 'sorry', '{customer}', 1, 'Sending', 'alice')", (RUN, RUN, RUN))
    return pg


def _done(call: Callable[[], object]) -> bool:
    """For a method that returns nothing: True once it returned."""
    call()
    return True


def _correction(step: int, state: CorrectionState) -> Correction:
    return Correction(run_id=RUN, step_idx=step, tool="sorry", audience=["customer"], rank=1,
                      state=state, correction={"text": "sorry"})


def _step() -> Step:
    now = datetime.datetime.now(datetime.UTC)
    return Step(run_id=RUN, step_idx=2, tool="mail", tool_class="irreversible",
                idempotency_key=step_key(RUN, 2, "mail"), args={},
                status=StepStatus.NOT_EXECUTED, external_ref=None, result=None, error=None,
                compensation=None, audience=[], after_pivot=False, comp_key=None,
                comp_status=None, comp_result=None, writer_epoch=1, created_at=now,
                updated_at=now)


Call = Callable[[SagaLog], Any]
OK, NONE, REFUSED = "ok", "none", "refused"

# method -> (the call, {role: outcome}); a role not named: "refused"
MATRIX: dict[str, tuple[Call, dict[str, str]]] = {
    # -- reads
    "run": (lambda log: log.run(RUN), {"sidecar": OK, "job": OK, "operator": OK}),
    "require_run": (lambda log: log.require_run(RUN), {"sidecar": OK, "job": OK, "operator": OK}),
    "require_owner": (lambda log: log.require_owner(RUN, 1),
                      {"sidecar": OK, "job": OK, "operator": OK}),
    "runs": (lambda log: log.runs(), {"sidecar": OK, "job": OK, "operator": OK}),
    "run_and_newest": (lambda log: log.run_and_newest(RUN)[1],
                       {"sidecar": OK, "job": OK, "operator": OK}),
    # this process's memory of what it wrote: nothing yet
    "cursor": (lambda log: log.cursor(RUN, 1), {"sidecar": NONE, "job": NONE, "operator": NONE}),
    "namespaces_with_run": (lambda log: log.namespaces_with_run("r"),
                            {"sidecar": OK, "job": OK, "operator": OK}),
    "open_runs": (lambda log: log.open_runs("", 10), {"sidecar": OK, "job": OK, "operator": OK}),
    "runs_changed_since": (lambda log: log.runs_changed_since(3600),
                           {"sidecar": OK, "job": OK, "operator": OK}),
    "steps": (lambda log: log.steps(RUN), {"sidecar": OK, "job": OK, "operator": OK}),
    "step": (lambda log: log.step(RUN, 0), {"sidecar": OK, "job": OK, "operator": OK}),
    "step_by_key": (lambda log: log.step_by_key(step_key(RUN, 0, "charge")),
                    {"sidecar": OK, "job": OK, "operator": OK}),
    "newest_step": (lambda log: log.newest_step(RUN), {"sidecar": OK, "job": OK, "operator": OK}),
    "unsettled": (lambda log: log.unsettled(), {"sidecar": OK, "job": OK, "operator": OK}),
    "commits_taken": (lambda log: log.commits_taken(RUN) or {"read"},
                      {"sidecar": OK, "job": OK, "operator": OK}),
    "certainty": (lambda log: log.certainty(RUN, 1), {"sidecar": OK, "job": OK, "operator": OK}),
    "lookup_hints": (lambda log: log.lookup_hints([step_key(RUN, 1, "wire")]),
                     {"sidecar": OK, "job": OK, "operator": OK}),
    "attempts": (lambda log: log.attempts(RUN) or ["read"],
                 {"sidecar": OK, "job": OK, "operator": OK}),
    "observations": (lambda log: log.observations(RUN),
                     {"sidecar": OK, "job": OK, "operator": OK}),
    "observed_effects": (lambda log: log.observed_effects([step_key(RUN, 2, "mail")]),
                         {"sidecar": OK, "job": OK, "operator": OK}),
    "late_effects": (lambda log: log.late_effects() or ["read"],
                     {"sidecar": OK, "job": OK, "operator": OK}),
    "corrections": (lambda log: log.corrections(RUN), {"sidecar": OK, "job": OK, "operator": OK}),
    "settlements": (lambda log: log.settlements(RUN), {"sidecar": OK, "job": OK, "operator": OK}),
    "open_step_counts": (lambda log: log.open_step_counts(),
                         {"sidecar": OK, "job": OK, "operator": OK}),
    "raw_rows": (lambda log: log.raw_rows(RUN)[0], {"sidecar": OK, "job": OK, "operator": OK}),
    "credential_namespace": (lambda log: [log.credential_namespace()],
                             {"sidecar": OK, "job": OK, "operator": OK}),
    "every_table_text": (lambda log: log.every_table_text() or ["read"],
                         {"sidecar": OK, "job": OK, "operator": OK}),
    "log_fingerprints": (lambda log: log.log_fingerprints([RUN]),
                         {"sidecar": OK, "job": OK, "operator": OK}),
    "wait_ages": (lambda log: [log.wait_ages(name) for name in WAITS],
                  {"sidecar": OK, "job": OK, "operator": OK}),
    "ping": (lambda log: _done(lambda: log.ping()), {"sidecar": OK, "job": OK, "operator": OK}),
    "db_now": (lambda log: log.db_now(), {"sidecar": OK, "job": OK, "operator": OK}),
    "require_schema": (lambda log: _done(lambda: log.require_schema()),
                       {"sidecar": OK, "job": OK, "operator": OK}),
    "prunable": (lambda log: log.prunable(FUTURE, 10).runs, {"sidecar": OK, "job": OK,
                                                             "operator": OK}),
    # -- the sidecar's writes: runs and intents
    "begin_run (new)": (lambda log: log.begin_run(f"{NS}/new", namespace=NS, pod_uid="p"),
                        {"sidecar": OK}),
    "begin_run (adopt a released pod's run)": (
        lambda log: log.begin_run(RUN, namespace=NS, pod_uid="pod-2").adopted, {"sidecar": OK}),
    "record_intent": (lambda log: log.record_intent(
        FRESH, 1, 0, tool="t", tool_class="reversible", key=step_key(FRESH, 0, "t"), args={},
        compensation=None, audience=[]), {"sidecar": OK}),
    "re_intend": (lambda log: log.re_intend(RUN, 1, 2, args={}, compensation=None,
                                            audience=[], call_timeout_s=1), {"sidecar": OK}),
    "update_run (stage a plan)": (lambda log: log.update_run(
        RUN, 1, pivot=PivotRecord(PivotState.AWAITING_APPROVAL, "h2")), {"sidecar": OK}),
    # -- the sidecar's and the Jobs' writes: outcomes, compensations, observations
    # the run's pod was released: its namespace's sidecar may take it over too
    "adopt": (lambda log: log.adopt(RUN, "job-1"), {"job": OK, "sidecar": OK}),
    "set_run_state": (lambda log: _done(lambda: log.set_run_state(RUN, 1, RunState.UNWINDING)),
                      {"sidecar": OK, "job": OK, "operator": REFUSED}),
    "record_outcome": (lambda log: log.record_outcome(RUN, 1, 1, StepStatus.FAILED),
                       {"sidecar": OK, "job": OK}),
    "record_compensation": (lambda log: log.record_compensation(
        RUN, 1, 0, CompensationStatus.DONE, comp_key=compensation_key(RUN, 0, "charge"),
        compensated=True),
        {"sidecar": OK, "job": OK}),
    "reopen": (lambda log: log.reopen(RUN, 1, 2, external_ref="x", result=None),
               {"sidecar": OK, "job": OK}),
    "record_observation": (lambda log: _done(lambda: log.record_observation(
        _step(), 1, StepStatus.CONFIRMED, external_ref="x", result=None, error=None)),
        {"sidecar": OK, "job": OK}),
    # step 2 is not UNKNOWN: nothing is handed over, but Postgres checks the INSERT all the same
    "ask_human": (lambda log: _done(
        lambda: log.ask_human(RUN, 1, 2, step_key(RUN, 2, "mail"), "why")),
                  {"sidecar": OK, "job": OK}),
    "record_correction": (lambda log: log.record_correction(
        1, Correction(run_id=RUN, step_idx=2, tool="sorry", audience=["customer"], rank=1,
                      state=CorrectionState.PROPOSED, correction=None)),
        {"sidecar": OK, "job": OK}),
    "claim_correction": (lambda log: log.claim_correction(RUN, 1), {"sidecar": OK, "job": OK}),
    "mark_correction_sent": (lambda log: _done(lambda: log.mark_correction_sent(
        _correction(3, CorrectionState.SENDING))), {"sidecar": OK, "job": OK}),
    # -- the operator's writes: decisions
    "decide_pivot": (lambda log: log.decide_pivot(
        RUN, PivotRecord(PivotState.APPROVED, "h1", decision="Approved", decided_by="alice"),
        RunState.COMMITTING), {"operator": OK}),
    "decide_correction": (lambda log: log.decide_correction(
        RUN, 0, CorrectionState.APPROVED, "alice", "fine"), {"operator": OK}),
    "settle_step": (lambda log: log.settle_step(RUN, 1, SettlementOutcome.NOT_HAPPENED,
                                                settler="alice", reason="checked"),
                    {"operator": OK}),
    "set_policy": (lambda log: log.set_policy(RUN, {"onOrphan": "unwind"}), {"operator": OK}),
    "release_pod": (lambda log: log.release_pod(FRESH, "pod-9"), {"operator": OK}),
    # -- the migration role's work
    "prune_batch": (lambda log: log.prune_batch(FUTURE, 10).runs, {}),
    "migrate": (lambda log: log.migrate(), {}),
}


def _outcome(call: Call, log: SagaLog) -> str:
    try:
        answer = call(log)
    except (SagaError, LookupError) as exc:
        cause = exc.__cause__
        if isinstance(cause, psycopg.errors.InsufficientPrivilege) or "privilege" in str(exc) \
                or "permission" in str(exc) or "row-level security" in str(exc):
            return REFUSED
        return f"raised {type(exc).__name__}: {exc}"
    return OK if answer or answer == 0 and answer is not False else NONE


@pytest.mark.parametrize("role", sorted(ROLE))
@pytest.mark.parametrize("method", sorted(MATRIX))
def test_each_role_may_do_exactly_its_part(world: str, method: str, role: str) -> None:
    call, expected = MATRIX[method]
    with SagaLog(with_user(world, ROLE[role]), min_size=1, max_size=1).open(
            migrate=False) as log:
        assert _outcome(call, log) == expected.get(role, REFUSED)


def test_every_public_method_is_in_the_table() -> None:
    methods = {name for name in dir(SagaLog) if not name.startswith("_")
               and callable(getattr(SagaLog, name))}
    plumbing = {"open", "close", "forget", "reconnect", "listen_runs", "watch_decisions",
                "write_outcomes"}
    named = {name.split(" ")[0] for name in MATRIX}
    assert methods - plumbing == named


def _methods(interface: type) -> set[str]:
    return {name for cls in interface.__mro__ if cls.__module__ == interfaces.__name__
            for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}


PLUMBING = {"forget", "listen_runs", "watch_decisions"}
"""Methods that write nothing to the log (this process's memory, a LISTEN)."""
READS_BEYOND = {"cursor", "open_runs", "runs_changed_since", "namespaces_with_run", "prunable",
                "log_fingerprints"}
"""The interfaces' methods outside `Reads` that write nothing either: what this process wrote
last, the operator's reads of every namespace, what a prune would remove."""


def _allowed(role: str) -> set[str]:
    """What Postgres lets `role` carry out (the table above)."""
    return {name.split(" ")[0] for name, (_, expected) in MATRIX.items()
            if expected.get(role, REFUSED) in (OK, NONE)}


def _writes() -> set[str]:
    """Every method of an interface that writes to the log."""
    every = set().union(*(_methods(interface) for interface in
                          (*interfaces.WRITES.values(), interfaces.MaintenanceStore)))
    return every - _methods(interfaces.Reads) - PLUMBING - READS_BEYOND


@pytest.mark.parametrize("role", sorted(interfaces.WRITES))
def test_each_roles_interface_offers_only_what_its_grants_allow(role: str) -> None:
    """The store's interfaces (agentsaga.store.interfaces) against the grants: every method the
    role's callers are typed with is one Postgres lets that role carry out (the table above)."""
    offered = _methods(interfaces.WRITES[role]) - PLUMBING
    assert offered <= _allowed(role), sorted(offered - _allowed(role))


@pytest.mark.parametrize("role", sorted(interfaces.WRITES))
def test_each_write_a_roles_interface_leaves_out_is_refused_to_that_role(role: str) -> None:
    """The converse: a write the role's callers are not typed with, Postgres refuses that role
    (the table above). The interfaces are the grants, not a part of them: a method left out of
    an interface is not one its role could still call through an untyped handle."""
    withheld = _writes() - _methods(interfaces.WRITES[role])
    assert withheld, "every interface offers every write"
    assert not withheld & _allowed(role), sorted(withheld & _allowed(role))


def test_what_counts_as_no_write_is_refused_to_no_role() -> None:
    assert set(ROLE) == set(interfaces.WRITES)
    for role in interfaces.WRITES:
        assert (_methods(interfaces.Reads) - PLUMBING) | READS_BEYOND <= _allowed(role), role


def test_no_agent_interface_offers_a_decision() -> None:
    decisions = _methods(interfaces.OperatorStore) - _methods(interfaces.Reads)
    for role in ("sidecar", "job"):
        assert not decisions & _methods(interfaces.WRITES[role])
    assert {"decide_pivot", "decide_correction", "settle_step"} <= decisions
