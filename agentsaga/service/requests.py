"""What a front end receives, checked before anything is written or called: the run id, the
arguments (a JSON object of bounded size, no NUL), a commit plan, a run's end."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from agentsaga import keys
from agentsaga.errors import InvalidArguments, InvalidRunId, PermissionDenied
from agentsaga.keys import run_id_problem
from agentsaga.saga.registry import JSON
from agentsaga.saga.tool_schema import check_args_size, sent_size
from agentsaga.states import RunState

END_STATES: dict[str, RunState] = {"Succeeded": RunState.SUCCEEDED, "Failed": RunState.FAILED}
"""How an agent may end its run (EndRun's `outcome`)."""


def check_run_id(run_id: str) -> None:
    problem = run_id_problem(run_id)
    if problem:
        raise InvalidRunId(problem)


def own_run_id(*, run_id: str, namespace: str) -> str:
    """The saga-log id (`keys.log_run_id`) of the run an agent names, refusing any run outside
    the sidecar's own `namespace`: the agent names it bare (`refund-1`), or qualified with that
    namespace (`payments/refund-1`, as the log and the CLI show it); another namespace's run
    is PermissionDenied, a malformed id InvalidRunId. Keyword-only: both are plain strings."""
    prefix, qualified, bare = run_id.rpartition(keys.NAMESPACE_SEPARATOR)
    if qualified and namespace:
        if prefix != namespace:
            raise PermissionDenied(
                f"run {run_id[:160]!r} names namespace {prefix[:64]!r}; this sidecar serves "
                f"the runs of namespace {namespace!r} only. Name the run without a namespace.")
        run_id = bare
    check_run_id(run_id)
    return keys.log_run_id(namespace, run_id)


DEFAULT_DEPTH = 64
# a JSON string, as one run of plain characters and escapes (no alternation per character)
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def check_depth(text: str, limit: int, what: str = "arguments") -> None:
    """Refuse JSON nested deeper than `limit` before parsing it (a parser recurses). Only text
    with more brackets than `limit` is read: its strings and everything but its brackets taken
    out, the deepest nesting is the largest running sum of +1 per opening and -1 per closing
    bracket, added up without a Python step per bracket."""
    if text.count("[") + text.count("{") <= limit:
        return
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    if max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0) > limit:
        raise InvalidArguments(
            f"{what} are nested more than {limit} levels deep (AGENTSAGA_MAX_JSON_DEPTH); "
            "flatten them")


def loads(text: str, limit: int, what: str) -> Any:
    """JSON from an agent, the one place it is parsed: depth checked first; malformed JSON, a
    key named twice in one object, or a lone surrogate (which no real system and no database
    takes) is InvalidArguments."""
    check_depth(text, limit, what)
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys(what))
    except json.JSONDecodeError as exc:
        raise InvalidArguments(f"{what} are not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidArguments(f"{what} are nested too deeply to be read") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4,300)
        raise InvalidArguments(f"{what} cannot be read: {exc}") from None
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
        raise InvalidArguments(f"{what} contain a lone UTF-16 surrogate (\\ud800-\\udfff "
                               "without its pair), which is not text; send valid Unicode")
    return value


def _unique_keys(what: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """An object_pairs_hook refusing a key named twice in one object: JSON parsers disagree on
    which value wins (Python's takes the last), so which one the agent meant is unknown."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        made = dict(pairs)
        if len(made) == len(pairs):
            return made
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                shown = key if len(key) <= 64 else key[:64] + "..."
                raise InvalidArguments(
                    f"{what}: the key {shown!r} appears twice in one JSON object, and which "
                    "value was meant cannot be known; send each key once")
            seen.add(key)
        return made
    return unique


def parse_args(args_json: str, limit: int, depth: int = DEFAULT_DEPTH) -> JSON:
    """Arguments as the agent sent them: a JSON object of at most `limit` bytes, nested at most
    `depth` levels."""
    check_args_size(len(args_json.encode()), limit)
    value = loads(args_json, depth, "arguments") if args_json.strip() else {}
    return _args_object(value, maybe_nul="\\u0000" in args_json)


def checked_args(value: Any, limit: int) -> JSON:
    """Arguments parsed already, with the request that carried them (MCP's tools/call, whose
    text `loads` read whole, its depth checked first), held to the rest of `parse_args`'s
    bounds without being parsed again: a JSON object, of at most `limit` bytes as a dispatch
    sends them (`sent_size`), without NUL."""
    args = _args_object(value, maybe_nul=True)
    check_args_size(sent_size(args), limit)
    return args


def _args_object(value: Any, *, maybe_nul: bool) -> JSON:
    if not isinstance(value, dict):
        raise InvalidArguments(
            f"arguments must be a JSON object, got a JSON {type(value).__name__}"
        )
    if maybe_nul and _has_nul(value):
        raise InvalidArguments("arguments contain a NUL character (\\u0000), which no real "
                               "system takes in text; remove it")
    return value


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def parse_plan(plan_json: str, limit: int, depth: int = DEFAULT_DEPTH) -> list[JSON]:
    """A commit plan: a JSON list of {"tool": ..., "args": {...}} (R10), of at most `limit`
    bytes (each step's arguments are held to AGENTSAGA_MAX_ARGS_BYTES when it is staged)."""
    _check_plan_size(len(plan_json.encode()), limit)
    return _plan_steps(loads(plan_json or "[]", depth + 2, "the commit plan's steps"))


def checked_plan(value: Any, limit: int) -> list[JSON]:
    """A commit plan parsed already, with the request that carried it (MCP's tools/call), held
    to `parse_plan`'s bounds without being parsed again (its size as sent, `sent_size`)."""
    _check_plan_size(sent_size(value), limit)
    return _plan_steps(value)


def _check_plan_size(size: int, limit: int) -> None:
    if size > limit:
        raise InvalidArguments(
            f"the commit plan is {size} bytes; the limit is {limit} (AGENTSAGA_MAX_PLAN_BYTES). "
            "Stage fewer steps, and pass large content by reference (a URL or an id), not "
            "inline; nothing was staged.")


def _plan_steps(plan: Any) -> list[JSON]:
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
