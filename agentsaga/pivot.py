"""The pivot (R10): before it only pure, reversible and authorise-only steps; the pivot is one
human approval of the whole staged plan; after it, only the approved commit steps run.

This module holds the plan (its hash and its record in `saga_runs.pivot`) and the gate that
every side-effecting call passes before its INTENDED row is written.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from agentsaga.log import Run
from agentsaga.registry import JSON, ToolSpec

PivotState = Literal["AwaitingApproval", "Approved", "Rejected"]
Policy = Literal["refuse", "count"]


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def plan_hash(staged: list[JSON], commit: list[JSON]) -> str:
    """The hash a human approves: over the steps done so far and the commit steps to come."""
    return hashlib.sha256(canonical({"staged": staged, "commit": commit}).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Admission:
    """The gate's answer for one call."""

    allowed: bool
    reason: str = ""
    after_pivot: bool = False
    counts_irreversible: bool = False
    """R10: the call is irreversible, before the pivot, and runs under the `count` policy."""
    commit_index: int | None = None
    """Which approved commit step this call is."""


def admit(run: Run, spec: ToolSpec, args: JSON, policy: Policy) -> Admission:
    """May this side-effecting call run now? Pure tools never come here."""
    pivot = run.pivot or {}
    state = pivot.get("state")
    if state == "AwaitingApproval":
        return Admission(False, f"the run is waiting for approval of plan {pivot.get('planHash')}; "
                                "no side effects until a human decides")
    if state == "Approved":
        used = set(pivot.get("used", []))
        for index, step in enumerate(pivot.get("commit", [])):
            if (index not in used and step.get("tool") == spec.name
                    and canonical(step.get("args", {})) == canonical(args)):
                return Admission(True, after_pivot=True, commit_index=index)
        return Admission(False, f"{spec.name} with these arguments is not in the approved plan "
                                f"{pivot.get('planHash')}; a changed plan needs a new approval")
    if state == "Rejected":
        return Admission(False, "the plan was rejected; the run is being unwound")
    if spec.commit_step:
        return Admission(False, f"{spec.name} is a commit step: stage it in the plan and call it "
                                "after the pivot is approved")
    if spec.needs_approval:
        why = "irreversible" if spec.cls == "irreversible" else "without a compensation"
        if policy == "count":
            return Admission(True, counts_irreversible=True)
        return Admission(False, f"{spec.name} is {why}: it needs human approval at the pivot "
                                "before it runs (R6, R10)")
    return Admission(True)
