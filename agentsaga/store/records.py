"""The saga log's records as the store hands them out: a run (`saga_runs`), its steps
(`saga_log`), its pivot record and its corrections (`corrections`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from agentsaga.states import (
    OPEN_RUN_STATES,
    UNSETTLED,
    CompensationStatus,
    CorrectionState,
    PivotState,
    RunState,
    StepStatus,
)

JSON = dict[str, Any]


@dataclass(frozen=True)
class PivotRecord:
    """R10: the staged plan a human approves, and the decision. Stored (and shown in the
    AgentRun's `status.pivot`) as camelCase JSON: `to_json` / `from_json`."""

    state: PivotState
    plan_hash: str
    staged_at: str = ""
    staged: list[JSON] = field(default_factory=list)
    """The steps done so far, as the approver sees them."""
    commit: list[JSON] = field(default_factory=list)
    """The commit steps to run once approved: {"tool", "args", "class", "audience"}."""
    irreversible_before_pivot: int = 0
    decision: str = ""
    decided_by: str = ""
    decided_at: str = ""
    reason: str = ""
    digest_key: str = ""
    """The run's secret key (base64url) of its commit steps' `argsDigest` (HMAC-SHA-256): kept in
    the saga log only, never shown, so a shown digest beside a masked card number cannot be
    brute-forced. Empty for a plan staged before it existed (plain SHA-256)."""

    @property
    def decided(self) -> bool:
        return self.state in (PivotState.APPROVED, PivotState.REJECTED)

    def deciding(self, decision: PivotState, approver: str, at: str,
                 reason: str) -> PivotRecord:
        return replace(self, state=decision, decision=str(decision), decided_by=approver,
                       decided_at=at, reason=reason)

    def to_json(self, *, with_key: bool = True) -> JSON:
        """As stored (`with_key`), or as printed for a person (without the digest key)."""
        out: JSON = {"state": str(self.state), "planHash": self.plan_hash,
                     "stagedAt": self.staged_at, "staged": self.staged, "commit": self.commit,
                     "irreversibleBeforePivot": self.irreversible_before_pivot}
        if self.decision:
            out.update(decision=self.decision, decidedBy=self.decided_by,
                       decidedAt=self.decided_at, reason=self.reason)
        if with_key and self.digest_key:
            out["digestKey"] = self.digest_key
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PivotRecord:
        return cls(state=PivotState(data["state"]), plan_hash=str(data.get("planHash", "")),
                   staged_at=str(data.get("stagedAt", "")), staged=list(data.get("staged") or []),
                   commit=list(data.get("commit") or []),
                   irreversible_before_pivot=int(data.get("irreversibleBeforePivot") or 0),
                   decision=str(data.get("decision") or ""),
                   decided_by=str(data.get("decidedBy") or ""),
                   decided_at=str(data.get("decidedAt") or ""),
                   reason=str(data.get("reason") or ""),
                   digest_key=str(data.get("digestKey") or ""))


@dataclass(frozen=True, kw_only=True)
class Run:
    run_id: str
    agent: str
    state: RunState
    owner_epoch: int
    owner: str
    pod_uid: str
    namespace: str
    irreversible_before_pivot: int
    pivot: PivotRecord | None
    trace_context: dict[str, Any] | None
    created_at: datetime
    ended_at: datetime | None
    policy: dict[str, Any] | None = None
    """The AgentRun's spec policy, as the operator copied it into the log (None: not yet)."""
    released_pod: str = ""
    """The uid of a bound pod the operator saw evicted or deleted."""

    @property
    def open(self) -> bool:
        return self.state in OPEN_RUN_STATES

    @property
    def bound_to_live_pod(self) -> bool:
        """Bound to a pod that the operator has not seen go (R12: not to be adopted)."""
        return bool(self.pod_uid) and self.pod_uid != self.released_pod


@dataclass(frozen=True, kw_only=True)
class Step:
    run_id: str
    step_idx: int
    tool: str
    tool_class: str
    idempotency_key: str
    args: dict[str, Any]
    status: StepStatus
    external_ref: str | None
    result: Any
    error: str | None
    compensation: dict[str, Any] | None
    audience: list[str]
    after_pivot: bool
    comp_key: str | None
    comp_status: CompensationStatus | None
    comp_result: Any
    writer_epoch: int
    created_at: datetime
    updated_at: datetime
    contract_hash: str | None = None
    """The version of its tool's contract the step ran under (`agentsaga.saga.contracts`); None for
    a step written before contracts were recorded."""
    contract: dict[str, Any] | None = None
    """That contract, to judge a later deploy's change of the tool."""

    @property
    def settled(self) -> bool:
        return self.status not in UNSETTLED


@dataclass(frozen=True)
class Adoption:
    run: Run
    adopted: bool
    """True when the run existed and its epoch was bumped for the new owner."""


@dataclass(frozen=True, kw_only=True)
class Correction:
    """R9: what to tell the people who saw an effect that was undone or cannot be."""

    run_id: str
    step_idx: int
    tool: str
    audience: list[str]
    rank: int
    state: CorrectionState
    correction: dict[str, Any] | None
    """The pre-written correction (template, recipients), or None for a Silent one."""
    approver: str | None = None
    decided_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"step_idx": self.step_idx, "tool": self.tool, "audience": self.audience,
                "rank": self.rank, "state": str(self.state), "correction": self.correction}


RUN_COLUMNS = (
    "run_id, agent, state, owner_epoch, owner, pod_uid, namespace, irreversible_before_pivot, "
    "pivot, trace_context, created_at, ended_at, pivot_decision, policy, released_pod"
)
STEP_COLUMNS = (
    "run_id, step_idx, tool, tool_class, idempotency_key, args, status, external_ref, result, "
    "error, compensation, audience, after_pivot, comp_key, comp_status, comp_result, "
    "writer_epoch, created_at, updated_at, contract_hash, contract"
)
CORRECTION_COLUMNS = (
    "run_id, step_idx, tool, audience, rank, state, correction, approver, decided_at")


def column_names(columns: str) -> tuple[str, ...]:
    """The names of a comma-separated column list, in its order."""
    return tuple(name.strip() for name in columns.split(","))


def by_name(names: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    """`row`, selected as the columns `names`, by column name: a record is built from the
    names, so a column added to or moved in a list cannot shift its neighbours into the wrong
    fields (a row of another width is refused)."""
    return dict(zip(names, row, strict=True))


RUN_NAMES = column_names(RUN_COLUMNS)
STEP_NAMES = column_names(STEP_COLUMNS)
CORRECTION_NAMES = column_names(CORRECTION_COLUMNS)
RUN_WIDTH = len(RUN_NAMES)


def run_from_row(row: Sequence[Any]) -> Run:
    """A `saga_runs` row selected as RUN_COLUMNS."""
    r = by_name(RUN_NAMES, row)
    pivot = r["pivot"]
    return Run(run_id=r["run_id"], agent=r["agent"], state=RunState(r["state"]),
               owner_epoch=r["owner_epoch"], owner=r["owner"], pod_uid=r["pod_uid"],
               namespace=r["namespace"],
               irreversible_before_pivot=r["irreversible_before_pivot"],
               pivot=None if pivot is None else decided_pivot(PivotRecord.from_json(pivot),
                                                              r["pivot_decision"]),
               trace_context=r["trace_context"], created_at=r["created_at"],
               ended_at=r["ended_at"], policy=r["policy"], released_pod=r["released_pod"])


def decided_pivot(staged: PivotRecord, decision: Mapping[str, Any] | None) -> PivotRecord:
    """The staged plan (written by the run's owner) with the decision (written by the
    operator's role only, `pivot_decision`): a decision is believed only from that column, for
    the plan hash it names, and the commit steps it admits are those it recorded."""
    if decision is None or decision.get("planHash") != staged.plan_hash:
        return replace(staged, state=PivotState.AWAITING_APPROVAL, decision="", decided_by="",
                       decided_at="", reason="") if staged.decided else staged
    approved = list(decision.get("commit") or [])
    shown = [({**staged.commit[i], **step} if i < len(staged.commit)
              and staged.commit[i].get("argsDigest") == step.get("argsDigest") else step)
             for i, step in enumerate(approved)]
    return replace(staged, state=PivotState(decision["decision"]),
                   decision=str(decision["decision"]),
                   decided_by=str(decision.get("decidedBy") or ""),
                   decided_at=str(decision.get("decidedAt") or ""),
                   reason=str(decision.get("reason") or ""), commit=shown)


def step_from_row(row: Sequence[Any]) -> Step:
    """A `saga_log` row selected as STEP_COLUMNS."""
    r = by_name(STEP_NAMES, row)
    comp_status = r["comp_status"]
    return Step(run_id=r["run_id"], step_idx=r["step_idx"], tool=r["tool"],
                tool_class=r["tool_class"], idempotency_key=r["idempotency_key"],
                args=r["args"], status=StepStatus(r["status"]),
                external_ref=r["external_ref"], result=r["result"], error=r["error"],
                compensation=r["compensation"], audience=list(r["audience"]),
                after_pivot=r["after_pivot"], comp_key=r["comp_key"],
                comp_status=None if comp_status is None else CompensationStatus(comp_status),
                comp_result=r["comp_result"], writer_epoch=r["writer_epoch"],
                created_at=r["created_at"], updated_at=r["updated_at"],
                contract_hash=r["contract_hash"], contract=r["contract"])


def correction_from_row(row: Sequence[Any]) -> Correction:
    """A `corrections` row selected as CORRECTION_COLUMNS."""
    r = by_name(CORRECTION_NAMES, row)
    return Correction(run_id=r["run_id"], step_idx=r["step_idx"], tool=r["tool"],
                      audience=list(r["audience"]), rank=r["rank"],
                      state=CorrectionState(r["state"]), correction=r["correction"],
                      approver=r["approver"], decided_at=r["decided_at"])
