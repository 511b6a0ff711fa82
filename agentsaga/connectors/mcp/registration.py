"""Upstream MCP tools as registered tools: each gets its class, audience, key placement, lookup
and compensation from its declaration, and goes into the same Registry as Python tools.

    declared ........................... registered as declared
    undeclared, readOnlyHint: true ..... registered as pure
    undeclared, anything else .......... hidden: not registered, never offered (R1)

A compensation is built before the call (R6) from what is known then (`args`, `key`); a lone
`{ref}` becomes `ref(key)`, which unwind resolves to the step's external id; other values that
read `ref` or `result` are filled in when the compensation runs, from the forward step's
effect found again by its declared lookup (R7), and what they read of the call itself is
checked before it, like the rest: a compensation that could not be filled in then is refused
now.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from agentsaga.connectors.mcp import templates
from agentsaga.connectors.mcp.declarations import (
    Lookup,
    ToolDeclaration,
    UpstreamDeclaration,
    UpstreamsFile,
)
from agentsaga.connectors.mcp.upstream import Upstream
from agentsaga.errors import ConfigurationError, OutcomeUnknown, Rejected
from agentsaga.saga.registry import JSON, NO_LOOKUP, Compensation, Effect, Registry, ref
from agentsaga.time_contract import TimeContract

META_KEY = "agentsaga.io/idempotencyKey"
DEFERRED = "$deferred"


@dataclass(frozen=True)
class Listed:
    """One upstream tool as `agentsaga mcp check` shows it."""

    upstream: str
    tool: str
    name: str
    offered: bool
    cls: str
    reason: str


def result_data(result: types.CallToolResult) -> Any:
    """What a tool returned: its structured content, else its text read as JSON, else text."""
    if result.structured_content is not None:
        return result.structured_content
    text = result_text(result)
    try:
        return json.loads(text)
    except ValueError:
        return {"text": text}


def result_text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _place_key(args: JSON, decl: ToolDeclaration, key: str) -> JSON:
    """R4: the key in the argument the declaration names (set, or appended to a list/text)."""
    placement = decl.key
    if placement is None or placement.argument is None:
        return args
    value = templates.render(placement.value, {"key": key})
    out = copy.deepcopy(args)
    *parents, leaf = placement.argument.split(".")
    target = out
    for part in parents:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise Rejected(f"argument {part!r} must be an object to carry the idempotency key")
    if placement.mode == "set":
        target[leaf] = value
    else:
        current = target.get(leaf)
        if current is None:
            target[leaf] = [value]
        elif isinstance(current, list):
            target[leaf] = [*current, value]
        else:
            target[leaf] = f"{current} {value}"
    return out


class UpstreamTool:
    """The function registered for one upstream tool (called by the Dispatcher and unwind)."""

    def __init__(self, upstream: Upstream, tool: str, name: str, decl: ToolDeclaration | None,
                 listed: types.Tool, siblings: dict[str, UpstreamTool]) -> None:
        self.upstream = upstream
        self.tool = tool
        self.name = name
        self.decl = decl
        self.input_schema: JSON = dict(listed.input_schema)
        self.description = decl.description if decl and decl.description else (
            listed.description or "")
        self.siblings = siblings
        self.timeout = decl.time.call_timeout_s if decl else 30.0
        self.__name__ = name

    def __call__(self, idempotency_key: str | None = None, **args: Any) -> Effect:
        decl = self.decl
        args = self._resolve_deferred(args)
        headers: dict[str, str] = {}
        meta: dict[str, Any] | None = None
        if decl is not None and idempotency_key is not None:
            args = _place_key(args, decl, idempotency_key)
            if decl.key is not None and decl.key.header:
                headers[decl.key.header] = idempotency_key
            meta = {META_KEY: idempotency_key}
        result = self.upstream.call(self.tool, args, timeout=self.timeout, meta=meta,
                                    headers=headers or None)
        if result.is_error:
            text = result_text(result) or "the tool reported an error"
            pattern = decl.unknown_errors if decl else ""
            if pattern and re.search(pattern, text, re.IGNORECASE):
                raise OutcomeUnknown(f"{self.name}: {text}")
            raise Rejected(f"{self.name}: {text}")
        return self._effect(result_data(result), decl.ref if decl else None)

    @staticmethod
    def _effect(data: Any, ref_path: str | None) -> Effect:
        found_ref = templates.read(ref_path, data) if ref_path else (
            data.get("id") if isinstance(data, Mapping) else None)
        body = dict(data) if isinstance(data, Mapping) else {"result": data}
        return Effect(None if found_ref is None else str(found_ref), body)

    # -- R7 ----------------------------------------------------------------------------------

    def lookup(self, key: str) -> Effect | None:
        assert self.decl is not None and isinstance(self.decl.lookup, Lookup)
        spec = self.decl.lookup
        args = templates.render(spec.args, {"key": key})
        result = self.upstream.call(spec.tool, args, timeout=self.timeout)
        if result.is_error:
            raise OutcomeUnknown(f"lookup {spec.tool} failed: {result_text(result)}")
        data = result_data(result)
        found = templates.read(spec.found, data)
        if found in (None, [], {}, ""):
            return None
        ref_path = spec.ref
        found_ref = templates.read(ref_path, data) if ref_path else (
            found.get("id") if isinstance(found, Mapping) else None)
        body = dict(found) if isinstance(found, Mapping) else {"result": found}
        return Effect(None if found_ref is None else str(found_ref), body)

    # -- R6 ----------------------------------------------------------------------------------

    def compensate(self, args: JSON, key: str) -> Compensation:
        assert self.decl is not None and self.decl.compensation is not None
        comp = self.decl.compensation
        target = self.siblings[comp.tool].name
        now = {"args": args, "key": key}

        def build(value: Any) -> Any:
            if isinstance(value, str):
                names = {p.split(".")[0] for p in templates.placeholders(value)}
                if value.strip() in ("{ref}", "{{ ref }}", "{{ref}}"):
                    return ref(key)
                if names & {"ref", "result"}:
                    # what it reads of this call (its arguments, its key) must be there now:
                    # found missing at unwind time, it would leave the effect uncompensated
                    templates.render_text(value, {**now, "ref": templates.LATER,
                                                  "result": templates.LATER})
                    return {DEFERRED: value, "of": {"tool": self.name, "key": key,
                                                    "args": args}}
                return templates.render_text(value, now)
            if isinstance(value, Mapping):
                return {k: build(v) for k, v in value.items()}
            if isinstance(value, list):
                return [build(v) for v in value]
            return value

        try:
            return Compensation(target, build(comp.args))
        except templates.TemplateError as exc:
            raise ValueError(str(exc)) from exc  # R6: refused before the call

    def _resolve_deferred(self, args: JSON) -> JSON:
        """Values of a compensation that read the forward step's `ref` or `result`."""
        cache: dict[str, Effect] = {}

        def fill(value: Any) -> Any:
            if isinstance(value, Mapping) and DEFERRED in value:
                of = value.get("of") or {}
                forward = self.siblings.get(_base(self, str(of.get("tool", ""))))
                key = str(of.get("key", ""))
                if forward is None:
                    raise Rejected(f"compensation names an unknown forward tool {of!r}")
                if key not in cache:
                    effect = forward.lookup(key)
                    if effect is None:
                        raise Rejected(f"the effect of step key {key} cannot be found by "
                                       f"{forward.name}'s lookup: nothing to compensate")
                    cache[key] = effect
                effect = cache[key]
                context = {"args": of.get("args") or {}, "key": key, "ref": effect.ref,
                           "result": effect.result}
                return templates.render_text(str(value[DEFERRED]), context)
            if isinstance(value, Mapping):
                return {k: fill(v) for k, v in value.items()}
            if isinstance(value, list):
                return [fill(v) for v in value]
            return value

        return fill(args)  # type: ignore[no-any-return]


def _base(tool: UpstreamTool, name: str) -> str:
    prefix = tool.upstream.decl.prefix
    return name[len(prefix):] if prefix and name.startswith(prefix) else name


def plan_upstream(upstream: Upstream) -> tuple[list[UpstreamTool], list[Listed]]:
    """Which tools of `upstream` are offered (and as what), and why the others are hidden."""
    decl: UpstreamDeclaration = upstream.decl
    listing = {t.name: t for t in upstream.list_tools()}
    missing = sorted(set(decl.tools) - set(listing))
    if missing:
        raise ConfigurationError(
            f"the MCP upstream {upstream.name!r} ({upstream.where}) offers no tool named "
            f"{', '.join(missing)}; it offers {', '.join(sorted(listing)) or 'none'}. Fix the "
            "upstreams file")
    for name, tool_decl in decl.tools.items():
        used = [tool_decl.compensation.tool] if tool_decl.compensation else []
        used += [tool_decl.lookup.tool] if isinstance(tool_decl.lookup, Lookup) else []
        for other in used:
            if other not in listing:
                raise ConfigurationError(
                    f"upstreams.{upstream.name}.tools.{name} uses {other!r}, which the "
                    f"upstream does not offer")
        if tool_decl.compensation and tool_decl.compensation.tool not in decl.tools:
            raise ConfigurationError(
                f"upstreams.{upstream.name}.tools.{name}: its compensation "
                f"{tool_decl.compensation.tool!r} must be declared too (for instance as "
                "irreversible with `lookup: none`): unwind calls it under its own key (R8)")
    siblings: dict[str, UpstreamTool] = {}
    tools: list[UpstreamTool] = []
    listed: list[Listed] = []
    for name, tool in sorted(listing.items()):
        offered_name = decl.prefix + name
        declared = decl.tools.get(name)
        read_only = bool(tool.annotations and tool.annotations.read_only_hint)
        if declared is None and not read_only:
            listed.append(Listed(upstream.name, name, offered_name, False, "-",
                                 "hidden: not declared in the upstreams file and not "
                                 "readOnlyHint: true (R1: no class, no call)"))
            continue
        wrapper = UpstreamTool(upstream, name, offered_name, declared, tool, siblings)
        siblings[name] = wrapper
        tools.append(wrapper)
        cls = declared.cls if declared else "pure"
        reason = "declared" if declared else "readOnlyHint: true, so pure"
        listed.append(Listed(upstream.name, name, offered_name, True, cls, reason))
    return tools, listed


def register(registry: Registry, tools: list[UpstreamTool]) -> Registry:
    for tool in tools:
        decl = tool.decl
        if decl is None or decl.cls == "pure":
            registry.register(tool, cls="pure", name=tool.name, description=tool.description)
            continue
        registry.register(
            tool, cls=decl.cls, name=tool.name, description=tool.description,
            audience=list(decl.audience),
            compensate=tool.compensate if decl.compensation else None,
            lookup=tool.lookup if isinstance(decl.lookup, Lookup) else NO_LOOKUP,
            # R7: the upstream's time contract as declared (`time:`); the call timeout is the
            # MCP client's own (`tool.timeout`)
            timing=TimeContract(decl.time.call_timeout_s, decl.time.visible_within_s,
                                decl.time.dedupes_for_s))
    return registry


def register_upstreams(registry: Registry, doc: UpstreamsFile) -> tuple[Registry, list[Listed]]:
    """Connect to every upstream and register its offered tools into `registry`."""
    listed: list[Listed] = []
    for name, decl in doc.upstreams.items():
        tools, shown = plan_upstream(Upstream(name, decl))
        register(registry, tools)
        listed += shown
    return registry, listed
