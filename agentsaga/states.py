"""Every state the product knows, as string enums, with the sets and mappings derived from them.

    StepStatus          a saga-log row (saga_log.status)             R2, R5, R7, R8
    CompensationStatus  a row's compensation (saga_log.comp_status)  R8
    CorrectionState     a correction (corrections.state)             R9
    SettlementState     a step handed to a human (step_settlements.state)   R7
    SettlementOutcome   what the human said (step_settlements.outcome; the CRD's
                        status.settlements[*].outcome)
    RunState            a run in the log (saga_runs.state)           R10, R11
    PivotState          the pivot record's state                      R10
    DispatchOutcome     what a tool call answers the agent (proto `Outcome`)   R5
    RunPhase            an AgentRun's status.phase (the CRD)

Adding a state is a change here plus the places that must decide what it means: the mappings
below fail loudly (a test checks that each covers its whole enum), the SQL CHECK lists, the proto
enum and the CRD's enums are tested against these enums.
"""

from __future__ import annotations

from enum import StrEnum


class StepStatus(StrEnum):
    INTENDED = "INTENDED"
    CONFIRMED = "CONFIRMED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    NOT_EXECUTED = "NOT_EXECUTED"
    COMPENSATED = "COMPENSATED"


UNSETTLED: frozenset[StepStatus] = frozenset({StepStatus.INTENDED, StepStatus.UNKNOWN})
"""R7: rows whose effect in the world is not known yet; settled by key before anything else."""
NOT_LIVE: frozenset[StepStatus] = frozenset({StepStatus.FAILED, StepStatus.NOT_EXECUTED})
"""Rows that left no effect: a commit step (R10) they carried out may run again."""

STEP_COUNT_FIELD: dict[StepStatus, str] = {
    StepStatus.INTENDED: "intended", StepStatus.CONFIRMED: "confirmed",
    StepStatus.FAILED: "failed", StepStatus.UNKNOWN: "unknown",
    StepStatus.NOT_EXECUTED: "notExecuted", StepStatus.COMPENSATED: "compensated",
}
"""The AgentRun's `status.steps` field counting each status."""

RECONCILE_RESULT: dict[StepStatus, str] = {
    StepStatus.CONFIRMED: "found", StepStatus.NOT_EXECUTED: "not_found",
    StepStatus.UNKNOWN: "unknown",
}
"""R7: the metric label of the status a reconcile leaves a row in."""


class CompensationStatus(StrEnum):
    INTENDED = "INTENDED"
    DONE = "DONE"
    FAILED = "FAILED"
    QUEUED = "QUEUED"


COMPENSATION_METRIC: dict[CompensationStatus, str] = {
    CompensationStatus.INTENDED: "intended", CompensationStatus.DONE: "sent",
    CompensationStatus.FAILED: "failed", CompensationStatus.QUEUED: "queued",
}
"""The `agentsaga.compensation.state` label of each compensation status."""


class CorrectionState(StrEnum):
    PROPOSED = "Proposed"
    APPROVED = "Approved"
    SENDING = "Sending"
    SENT = "Sent"
    DISMISSED = "Dismissed"
    SILENT = "Silent"


CORRECTIONS_SHOWN: frozenset[CorrectionState] = frozenset(CorrectionState) - {
    CorrectionState.SILENT}
"""States an AgentRun's `status.corrections` may show (a Silent one needs nobody)."""
CORRECTIONS_PENDING: frozenset[CorrectionState] = frozenset({
    CorrectionState.PROPOSED, CorrectionState.APPROVED, CorrectionState.SENDING})
"""Corrections a human or a sender still has to act on."""
CORRECTIONS_TO_SEND: frozenset[CorrectionState] = frozenset({
    CorrectionState.APPROVED, CorrectionState.SENDING})
"""Approved corrections, and those a crash left Sending (looked up by key before a resend)."""


class SettlementState(StrEnum):
    WAITING = "Waiting"
    SETTLED = "Settled"


class SettlementOutcome(StrEnum):
    HAPPENED = "Happened"
    NOT_HAPPENED = "NotHappened"


SETTLED_STATUS: dict[SettlementOutcome, StepStatus] = {
    SettlementOutcome.HAPPENED: StepStatus.CONFIRMED,
    SettlementOutcome.NOT_HAPPENED: StepStatus.NOT_EXECUTED}
"""The status a human's settlement gives an UNKNOWN step."""


class RunState(StrEnum):
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    COMMITTING = "committing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNWINDING = "unwinding"
    UNWOUND = "unwound"


OPEN_RUN_STATES: frozenset[RunState] = frozenset({
    RunState.RUNNING, RunState.AWAITING_APPROVAL, RunState.COMMITTING})
"""States of a run that still accepts calls (a pivot decision moves it to committing or
unwinding)."""


class PivotState(StrEnum):
    AWAITING_APPROVAL = "AwaitingApproval"
    APPROVED = "Approved"
    REJECTED = "Rejected"


DECIDED: frozenset[PivotState] = frozenset({PivotState.APPROVED, PivotState.REJECTED})

RUN_STATE_AFTER_DECISION: dict[PivotState, RunState] = {
    PivotState.APPROVED: RunState.COMMITTING, PivotState.REJECTED: RunState.UNWINDING}


class DispatchOutcome(StrEnum):
    CONFIRMED = "CONFIRMED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    STEP_UNRESOLVED = "STEP_UNRESOLVED"
    NEEDS_APPROVAL = "NEEDS_APPROVAL"
    NEEDS_HUMAN = "NEEDS_HUMAN"


class RunPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    AWAITING_APPROVAL = "AwaitingApproval"
    COMMITTING = "Committing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ORPHANED = "Orphaned"
    RECONCILING = "Reconciling"
    UNWINDING = "Unwinding"
    UNWOUND = "Unwound"


LIVE_PHASES: frozenset[RunPhase] = frozenset({
    RunPhase.PENDING, RunPhase.RUNNING, RunPhase.AWAITING_APPROVAL, RunPhase.COMMITTING})
"""A pod (or nobody yet) drives the run; eviction of its pod orphans it."""
JOB_PHASES: frozenset[RunPhase] = frozenset({RunPhase.RECONCILING, RunPhase.UNWINDING})
"""A Job drives the run."""
FINAL_PHASES: frozenset[RunPhase] = frozenset({
    RunPhase.SUCCEEDED, RunPhase.FAILED, RunPhase.UNWOUND})

ENDED_PHASE: dict[RunState, RunPhase] = {
    RunState.SUCCEEDED: RunPhase.SUCCEEDED, RunState.FAILED: RunPhase.FAILED,
    RunState.UNWOUND: RunPhase.UNWOUND}
"""The phase an AgentRun shows once its run ended in the log this way."""
