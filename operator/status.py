"""AgentRun status values: phases, metav1.Condition entries, timestamps. Pure functions."""

from __future__ import annotations

import datetime
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from agentsaga.keys import log_run_id
from agentsaga.states import FINAL_PHASES as FINAL_PHASES  # the phases, for the handlers
from agentsaga.states import JOB_PHASES as JOB_PHASES
from agentsaga.states import LIVE_PHASES as LIVE_PHASES

Obj = dict[str, Any]


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def stamp(when: datetime.datetime | None = None) -> str:
    return (when or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def spec_run_id(body: Mapping[str, Any]) -> str:
    """The run id the AgentRun names: spec.runId, else the object's name."""
    spec = body.get("spec") or {}
    return str(spec.get("runId") or body["metadata"]["name"])


def run_id(body: Mapping[str, Any]) -> str:
    """The run's saga-log id: a run of the AgentRun's own namespace, always
    (`namespace/<spec.runId>`, `agentsaga.keys.log_run_id`)."""
    return log_run_id(str(body["metadata"].get("namespace") or ""), spec_run_id(body))


def generation(body: Mapping[str, Any]) -> int:
    return int((body.get("metadata") or {}).get("generation") or 0)


def condition(body: Mapping[str, Any], type_: str) -> Obj | None:
    for entry in (body.get("status") or {}).get("conditions") or []:
        if entry.get("type") == type_:
            return dict(entry)
    return None


def with_condition(body: Mapping[str, Any], type_: str, status: bool | str, reason: str,
                   message: str, conditions: list[Obj] | None = None) -> list[Obj]:
    """The conditions list with `type_` set (metav1.Condition shape); lastTransitionTime moves
    only when the status flips. Pass `conditions` to chain several changes."""
    current = list(conditions if conditions is not None
                   else (body.get("status") or {}).get("conditions") or [])
    value = status if isinstance(status, str) else ("True" if status else "False")
    old = next((c for c in current if c.get("type") == type_), None)
    entry = {
        "type": type_, "status": value, "reason": reason, "message": message[:32768],
        "observedGeneration": generation(body),
        "lastTransitionTime": (old["lastTransitionTime"]
                               if old and old.get("status") == value
                               and old.get("lastTransitionTime") else stamp()),
    }
    return [c for c in current if c.get("type") != type_] + [entry]


def phase(body: Mapping[str, Any]) -> str:
    return str((body.get("status") or {}).get("phase") or "")


_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def agentrun_name(run_id: str) -> str:
    """The AgentRun's name: the run id if it is a valid object name, else a stable derived
    one (the run id itself is always in `spec.runId`)."""
    if len(run_id) <= 253 and _DNS1123.fullmatch(run_id):
        return run_id
    base = re.sub(r"[^a-z0-9]+", "-", run_id.lower()).strip("-")[:40] or "run"
    return f"{base}-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"
