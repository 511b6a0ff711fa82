"""What a front end receives, checked before anything is written or called: the run id, the
arguments (a JSON object of bounded size, no NUL), a commit plan, a run's end."""

from __future__ import annotations

import json
from typing import Any

from agentsaga.errors import InvalidArguments, InvalidRunId
from agentsaga.keys import run_id_problem
from agentsaga.registry import JSON
from agentsaga.states import RunState

END_STATES: dict[str, RunState] = {"Succeeded": RunState.SUCCEEDED, "Failed": RunState.FAILED}
"""How an agent may end its run (EndRun's `outcome`)."""


def check_run_id(run_id: str) -> None:
    problem = run_id_problem(run_id)
    if problem:
        raise InvalidRunId(problem)


def parse_args(args_json: str, limit: int) -> JSON:
    """Arguments as the agent sent them: a JSON object of at most `limit` bytes."""
    size = len(args_json.encode())
    if size > limit:
        raise InvalidArguments(
            f"arguments are {size} bytes; the limit is {limit} (AGENTSAGA_MAX_ARGS_BYTES). "
            "Pass large content by reference (a URL or an id), not inline."
        )
    try:
        value = json.loads(args_json) if args_json.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidArguments(f"arguments are not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidArguments("arguments are nested too deeply to be read") from None
    if not isinstance(value, dict):
        raise InvalidArguments(
            f"arguments must be a JSON object, got a JSON {type(value).__name__}"
        )
    if "\\u0000" in args_json and _has_nul(value):
        raise InvalidArguments("arguments contain a NUL character (\\u0000), which no real "
                               "system takes in text; remove it")
    return value


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def parse_plan(plan_json: str) -> list[JSON]:
    """A commit plan: a JSON list of {"tool": ..., "args": {...}} (R10)."""
    try:
        plan = json.loads(plan_json or "[]")
    except json.JSONDecodeError as exc:
        raise InvalidArguments(f"the commit plan is not valid JSON: {exc}") from None
    if not isinstance(plan, list) or not all(isinstance(s, dict) for s in plan):
        raise InvalidArguments(
            'the commit plan must be a JSON list of {"tool": ..., "args": {...}}')
    return plan


def end_state(outcome: str) -> RunState:
    """EndRun's outcome ('' means Succeeded) as the run's final state."""
    state = END_STATES.get(outcome or "Succeeded")
    if state is None:
        raise InvalidArguments(f"outcome {outcome!r}: use Succeeded or Failed")
    return state
