"""A tool's contract, versioned (R6, R8): what the registry declares about undoing and finding
its effect, hashed. Each intent records the contract it ran under (`saga_log.contract_hash`
and `contract`); unwind rebuilds the step's compensation from the registry's current
declaration and runs it only when that is the compensation the step stored and the contract
still builds it the same way (`undo_problem`). Anything else is shown to a person, never run.

    contract   {"tool", "class", "compensate": code, "compensatingTool": {name, class, code},
                "lookup": code, "lookupSteps": code, "timing": {...}}
    code       {"name": module.qualname, "digest": sha256 of its source (else its bytecode)}

A deploy that changes only how a tool is looked up or timed is compatible: the compensation is
what undoes the effect, so `undo` (the compensate function and the compensating tool) alone
decides whether a step written under an older contract may still be undone automatically.
An edit of the compensate function's or the compensating tool's source (a comment included)
is not: a person looks at the step first.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
from typing import Any

from agentsaga.saga.registry import JSON, Registry, ToolSpec

UNDO = ("tool", "class", "compensate", "compensatingTool")
"""The parts of a contract that decide what undoes a step's effect."""


def code(fn: Any) -> JSON | None:
    """A function's name and the digest of its source (of its bytecode when the source is not
    at hand); None for no function."""
    if fn is None:
        return None
    target = inspect.unwrap(fn)
    if isinstance(target, functools.partial):
        inner = code(target.func) or {}
        return {"name": inner.get("name", ""), "digest": _digest(
            [inner.get("digest"), repr(target.args), repr(sorted(target.keywords.items()))])}
    name = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):
        compiled = getattr(target, "__code__", None)
        text = compiled.co_code.hex() if compiled is not None else type(target).__qualname__
    return {"name": name, "digest": hashlib.sha256(text.encode()).hexdigest()[:16]}


def contract(spec: ToolSpec, registry: Registry, compensating_tool: str | None) -> JSON:
    """The contract `spec` runs under in this deploy; `compensating_tool`: the tool its
    compensation names (built for the step's arguments), if any."""
    comp = registry.get(compensating_tool) if compensating_tool else None
    return {"tool": spec.name, "class": spec.cls, "compensate": code(spec.compensate),
            "compensatingTool": None if comp is None else {
                "name": comp.name, "class": comp.cls, "code": code(comp.fn)},
            "lookup": code(spec.lookup), "lookupSteps": code(spec.lookup_steps),
            "timing": dataclasses.asdict(spec.timing)}


_VERSIONS: dict[tuple[int, int, str | None], tuple[ToolSpec, ToolSpec | None, JSON, str]] = {}


def versioned(spec: ToolSpec, registry: Registry,
              compensating_tool: str | None) -> tuple[JSON, str]:
    """`contract(...)` and its hash, computed once per registered tool (sources are read once,
    not at every dispatch)."""
    comp = registry.get(compensating_tool) if compensating_tool else None
    key = (id(spec), id(comp), compensating_tool)
    known = _VERSIONS.get(key)
    if known is None or known[0] is not spec or known[1] is not comp:
        value = contract(spec, registry, compensating_tool)
        known = _VERSIONS[key] = (spec, comp, value, contract_hash(value))
    return known[2], known[3]


def contract_hash(value: JSON) -> str:
    return _digest(value)


def undo_part(value: JSON) -> JSON:
    return {k: value.get(k) for k in UNDO}


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
