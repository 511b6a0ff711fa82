"""The saga service as the MCP endpoint sees it (`port.SagaPort`), over today's Dispatcher and
the sidecar's extensions (pivot, AgentRun binding).

This is the one module to replace when `agentsaga.service.SagaService` holds these decisions:
the endpoint then takes the service itself. Nothing here decides anything the gRPC servicer
does not decide the same way; the checks are the servicer's (run id, rate limit, arguments).
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from typing import Any

from agentsaga.sidecar.limits import RunRateLimiter
from agentsaga.sidecar.mcp_endpoint.port import RunStarted, ToolInfo
from agentsaga.sidecar.server import Extensions

from agentsaga.dispatch import Dispatcher, DispatchResult, check_run_id, parse_args
from agentsaga.errors import InvalidArguments
from agentsaga.registry import JSON, ToolSpec


class DispatcherService:
    """`SagaPort` over a Dispatcher, its Extensions and the per-run rate limiter that the gRPC
    servicer uses too (one budget per run, whichever front end the call comes through)."""

    def __init__(self, dispatcher: Dispatcher, extensions: Extensions,
                 limiter: RunRateLimiter) -> None:
        self.dispatcher = dispatcher
        self.ext = extensions
        self.limiter = limiter

    def begin_or_adopt(self, run_id: str, *, agent: str = "") -> RunStarted:
        run, adopted = self.dispatcher.begin_run(run_id, agent=agent)
        if self.ext.on_begin is not None:
            self.ext.on_begin(run.run_id, run.agent, adopted)
        return RunStarted(run.run_id, run.owner_epoch, adopted)

    def is_begun_here(self, run_id: str) -> bool:
        return run_id in self.dispatcher._epochs  # the epochs this process holds (R12)

    def dispatch(self, run_id: str, tool: str, args: JSON) -> DispatchResult:
        check_run_id(run_id)
        self.limiter.take(run_id)
        checked = parse_args(json.dumps(args), self.dispatcher.settings.max_args_bytes)
        return self.dispatcher.dispatch(run_id, tool, checked)

    def reach_pivot(self, run_id: str, plan: list[JSON]) -> dict[str, Any]:
        check_run_id(run_id)
        if self.ext.reach_pivot is None:
            raise InvalidArguments("the pivot is not enabled in this sidecar")
        return self.ext.reach_pivot(run_id, plan)

    def await_decision(self, run_id: str, timeout_s: float) -> dict[str, Any]:
        check_run_id(run_id)
        if self.ext.await_decision is None:
            raise InvalidArguments("the pivot is not enabled in this sidecar")
        return self.ext.await_decision(run_id, timeout_s)

    def end_run(self, run_id: str, outcome: str) -> str:
        if outcome not in ("Succeeded", "Failed"):
            raise InvalidArguments(f"outcome {outcome!r}: use Succeeded or Failed")
        return self.dispatcher.end_run(run_id, outcome.lower()).state

    def list_tools(self) -> list[ToolInfo]:
        return [ToolInfo(s.name, s.cls, s.description, input_schema(s),
                         read_only=s.cls == "pure") for s in self.dispatcher.registry]


def input_schema(spec: ToolSpec) -> JSON:
    """The tool's JSON Schema: the one it declares (upstream MCP tools carry theirs), else one
    read from its signature (the harness's `idempotency_key` left out)."""
    declared = getattr(spec, "input_schema", None) or getattr(spec.fn, "input_schema", None)
    if isinstance(declared, dict):
        return declared
    return signature_schema(spec.fn)


_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               dict: "object", list: "array"}


def signature_schema(fn: Any) -> JSON:
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
    except (TypeError, ValueError, NameError):
        return {"type": "object"}
    properties: dict[str, JSON] = {}
    required: list[str] = []
    for name, param in signature.parameters.items():
        if name == "idempotency_key" or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        properties[name] = _type_schema(hints.get(name, Any))
        if param.default is inspect.Parameter.empty:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


def _type_schema(hint: Any) -> JSON:
    origin = typing.get_origin(hint)
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if origin in (list, tuple, set):
        items = typing.get_args(hint)
        return {"type": "array", **({"items": _type_schema(items[0])} if items else {})}
    if origin is dict:
        return {"type": "object"}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(hint))}
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(a) for a in typing.get_args(hint) if a is not type(None)]
        return options[0] if len(options) == 1 else {"anyOf": options}
    return {}
