"""The saga log's records as Postgres stores them: a run (`saga_runs`) and its steps
(`saga_log`), with the column lists the log's statements select."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

StepStatus = Literal["INTENDED", "CONFIRMED", "FAILED", "UNKNOWN", "NOT_EXECUTED", "COMPENSATED"]
UNSETTLED: tuple[str, ...] = ("INTENDED", "UNKNOWN")
OPEN_STATES: tuple[str, ...] = ("running", "awaiting_approval", "committing")
"""States of a run that still accepts calls (a pivot decision moves it to committing or
unwinding)."""


@dataclass(frozen=True)
class Run:
    run_id: str
    agent: str
    state: str
    owner_epoch: int
    owner: str
    pod_uid: str
    namespace: str
    irreversible_before_pivot: int
    pivot: dict[str, Any] | None
    trace_context: dict[str, Any] | None
    created_at: datetime
    ended_at: datetime | None

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES


@dataclass(frozen=True)
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
    comp_status: str | None
    comp_result: Any
    writer_epoch: int
    created_at: datetime
    updated_at: datetime

    @property
    def settled(self) -> bool:
        return self.status not in UNSETTLED


@dataclass(frozen=True)
class Adoption:
    run: Run
    adopted: bool
    """True when the run existed and its epoch was bumped for the new owner."""


RUN_COLUMNS = (
    "run_id, agent, state, owner_epoch, owner, pod_uid, namespace, irreversible_before_pivot, "
    "pivot, trace_context, created_at, ended_at"
)
STEP_COLUMNS = (
    "run_id, step_idx, tool, tool_class, idempotency_key, args, status, external_ref, result, "
    "error, compensation, audience, after_pivot, comp_key, comp_status, comp_result, "
    "writer_epoch, created_at, updated_at"
)


RUN_WIDTH = len(RUN_COLUMNS.split(","))
RUN_AND_NEWEST = (
    f"SELECT {', '.join('r.' + c.strip() for c in RUN_COLUMNS.split(','))}, s.*"
    " FROM saga_runs r LEFT JOIN LATERAL"
    f" (SELECT {STEP_COLUMNS} FROM saga_log WHERE saga_log.run_id = r.run_id"
    " ORDER BY step_idx DESC LIMIT 1) s ON true WHERE r.run_id = %s"
)
