"""The JSON Schema of a tool's arguments, as front ends offer it (MCP `inputSchema`).

A tool that declares its schema (an upstream MCP tool carries the one its server listed) is
offered with it; any other is described from its signature and type hints, without the
harness's own `idempotency_key`.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

from agentsaga.registry import JSON, ToolSpec

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               dict: "object", list: "array"}


def input_schema(spec: ToolSpec) -> JSON:
    """The tool's JSON Schema: the one its function declares, else one from its signature."""
    declared = getattr(spec.fn, "input_schema", None)
    if isinstance(declared, dict):
        return declared
    return signature_schema(spec.fn)


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
