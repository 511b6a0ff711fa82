"""The types of a tool's arguments, from its signature's type hints (R2): the pydantic adapter
that validates them and the JSON Schema every front end offers (`agentsaga.saga.tool_schema` uses
both), and the check at registration that a schema can be made at all: a tool whose argument
has a type no JSON Schema describes (a callable, an arbitrary class) is refused when it is
registered, naming the argument, rather than failing every listing of every tool."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, NotRequired, Required

from pydantic import ConfigDict, PydanticUserError, TypeAdapter, with_config
from typing_extensions import TypedDict

JSON = dict[str, Any]
HARNESS_ARGUMENT = "idempotency_key"


@functools.lru_cache(maxsize=1024)
def arguments_adapter(fn: Callable[..., Any], pure: bool) -> TypeAdapter[Any] | None:
    """The pydantic adapter of a tool's arguments, built once per function (None when its
    signature cannot be read)."""
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError):
        return None
    fields: dict[str, Any] = {}
    open_ended = False
    for name, param in signature.parameters.items():
        if param.kind == param.VAR_KEYWORD:
            open_ended = True
            continue
        if param.kind == param.VAR_POSITIONAL or (name == HARNESS_ARGUMENT and not pure):
            continue
        hint = hints.get(name, Any)
        fields[name] = Required[hint] if param.default is inspect.Parameter.empty \
            else NotRequired[hint]
    config = ConfigDict(strict=True, extra="allow" if open_ended else "forbid",
                        title=f"{getattr(fn, '__name__', 'tool')} arguments")
    shape = with_config(config)(TypedDict(f"{getattr(fn, '__name__', 'Tool')}Arguments",
                                          fields))  # type: ignore[operator]
    return TypeAdapter(shape)


@functools.lru_cache(maxsize=1024)
def signature_schema(fn: Callable[..., Any], pure: bool) -> JSON:
    adapter = arguments_adapter(fn, pure)
    if adapter is None:
        return {"type": "object"}
    schema: JSON = adapter.json_schema()
    schema.setdefault("required", [])
    return schema


def schema_problem(fn: Callable[..., Any], pure: bool) -> str | None:
    """Why no JSON Schema can be made of `fn`'s arguments (naming each argument at fault), or
    None when one can."""
    try:
        signature_schema(fn, pure)
        return None
    except (PydanticUserError, TypeError, ValueError) as whole:
        hints = typing.get_type_hints(fn, include_extras=True)
        at_fault = []
        for name, hint in hints.items():
            if name == "return" or (name == HARNESS_ARGUMENT and not pure):
                continue
            try:
                TypeAdapter(hint).json_schema()
            except (PydanticUserError, TypeError, ValueError):
                at_fault.append(f"{name!r} ({getattr(hint, '__name__', None) or hint})")
        which = ", ".join(at_fault) or "its arguments"
        return (f"no JSON Schema describes {which} ({type(whole).__name__}); the agent could "
                "not be told what to send. Annotate with JSON types (str, int, float, bool, "
                "list, dict, Literal, a TypedDict or a pydantic model)")
