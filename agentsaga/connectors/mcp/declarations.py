"""The upstreams file: which MCP servers to proxy and, per tool, its saga declaration.

    upstreams:
      tickets:
        url: http://127.0.0.1:9000/mcp          # Streamable HTTP, or
        # command: [python, -m, mytickets]      # a command spoken to over stdio
        tools:
          create_ticket:
            class: compensatable                # R1: pure, reversible, compensatable, irreversible
            audience: [support_team]            # R9
            key: {argument: labels, mode: append, value: "saga-{key}"}   # R4
            # key: {header: Idempotency-Key}    # for upstreams that honour the header
            ref: id                             # JMESPath: the external id in the tool's result
            lookup:                             # R7: find the effect by key
              tool: search_tickets
              args: {label: "saga-{key}"}
              found: "tickets[0]"               # JMESPath: the effect, empty when none
              ref: "tickets[0].id"
            compensation:                       # R6: written before the call
              tool: close_ticket
              args: {ticket: "{ref}", reason: "Rolled back"}
            time: {call_timeout_s: 10, visible_within_s: 5, dedupes_for_s: 0}
          search_tickets: {class: pure}

Every mistake is reported with its place in the file and what to write instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentsaga.connectors.mcp.templates import (
    TemplateError,
    check_expression,
    check_template,
    placeholders,
)
from agentsaga.errors import ConfigurationError

DEFAULT_UNKNOWN_ERRORS = r"\b(502|503|504)\b|time(d)? ?out|connection reset"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class KeyPlacement(_Model):
    """Where the step's idempotency key goes (R4): an argument, or an HTTP header."""

    argument: str | None = None
    """The argument to set or append to (dotted for nested objects: `metadata.saga_key`)."""
    mode: Literal["set", "append"] = "set"
    value: str = "{key}"
    """What is written: a template over `key`, e.g. `saga-{key}` for a label."""
    header: str | None = None
    """An HTTP header for upstreams that honour one, e.g. `Idempotency-Key`."""

    @model_validator(mode="after")
    def _one_place(self) -> KeyPlacement:
        if (self.argument is None) == (self.header is None):
            raise ValueError("give exactly one of `argument` (with `mode` set or append) or "
                             "`header` (e.g. Idempotency-Key)")
        return self


class Lookup(_Model):
    """How to find a step's effect by its key (R7): another tool of the same upstream."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    """Arguments, templated over `key`."""
    found: str = "@"
    """JMESPath over the lookup's result: the effect; null, [] or {} means not found."""
    ref: str | None = None
    """JMESPath over the lookup's result: the effect's external id."""


class CompensationTemplate(_Model):
    """The counter-action (R6): another tool of the same upstream, arguments templated over the
    forward call's `args`, `key`, `ref` and `result` (the last two are filled in at unwind)."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class TimeContract(_Model):
    call_timeout_s: float = Field(default=30.0, gt=0)
    """How long a call may take before its outcome is UNKNOWN."""
    visible_within_s: float = Field(default=0.0, ge=0)
    """How long after a call its effect may take to show in the lookup."""
    dedupes_for_s: float = Field(default=0.0, ge=0)
    """How long the upstream itself deduplicates a re-sent key (0: it does not)."""


class ToolDeclaration(_Model):
    cls: Literal["pure", "reversible", "compensatable", "irreversible"] = Field(alias="class")
    audience: list[str] = Field(default_factory=lambda: ["agent"])
    key: KeyPlacement | None = None
    ref: str | None = None
    """JMESPath over the call's result: the external id (default: `id` when present)."""
    lookup: Lookup | Literal["none"] | None = None
    compensation: CompensationTemplate | None = None
    time: TimeContract = TimeContract()
    unknown_errors: str = DEFAULT_UNKNOWN_ERRORS
    """A tool error whose text matches this regex may have happened (UNKNOWN); others FAILED."""
    description: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> ToolDeclaration:
        if self.cls == "pure":
            if self.key or self.compensation or self.lookup not in (None, "none"):
                raise ValueError("a pure tool has nothing to key, look up or compensate; drop "
                                 "key/lookup/compensation or give it the class it really has")
            return self
        if self.key is None:
            raise ValueError(f"a {self.cls} tool needs `key:` (where its idempotency key goes: "
                             "an argument, or a header) so that the real system sees it (R4)")
        if self.lookup is None:
            raise ValueError(f"a {self.cls} tool needs `lookup:` (a tool that finds its effect "
                             "by key), or `lookup: none` to have a human settle unknowns (R7)")
        if self.cls in ("reversible", "compensatable") and self.compensation is None:
            raise ValueError(f"a {self.cls} tool needs `compensation:` (its counter-action), "
                             "written now, not during an incident (R1, R6)")
        if self.compensation is not None and "result" in _names(self.compensation.args) and (
                not isinstance(self.lookup, Lookup)):
            raise ValueError("the compensation reads `result`, which is found again by the "
                             "lookup at unwind time; declare a lookup")
        return self


class UpstreamDeclaration(_Model):
    url: str | None = None
    command: list[str] | None = None
    env: dict[str, str] | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    prefix: str = ""
    """Offered names are `prefix + tool` (to keep two upstreams' tools apart)."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    tools: dict[str, ToolDeclaration] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_transport(self) -> UpstreamDeclaration:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of `url` (Streamable HTTP, e.g. "
                             "http://127.0.0.1:9000/mcp) or `command` (a list: program and "
                             "arguments, spoken to over stdio)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        if self.command is not None and not self.command:
            raise ValueError("command is empty: give the program and its arguments")
        return self


class UpstreamsFile(_Model):
    upstreams: dict[str, UpstreamDeclaration]


def _names(value: Any) -> set[str]:
    """The top-level names a templated value refers to."""
    found: set[str] = set()
    if isinstance(value, str):
        found |= {p.split(".")[0] for p in placeholders(value)}
    elif isinstance(value, Mapping):
        for v in value.values():
            found |= _names(v)
    elif isinstance(value, list):
        for v in value:
            found |= _names(v)
    return found


_ALLOWED = {"key": {"key"}, "lookup": {"key"}, "compensation": {"args", "key", "ref", "result"}}


def _check_templates(doc: UpstreamsFile) -> list[str]:
    problems: list[str] = []
    for up_name, up in doc.upstreams.items():
        for tool_name, tool in up.tools.items():
            where = f"upstreams.{up_name}.tools.{tool_name}"
            parts: list[tuple[str, str, Any]] = []
            if tool.key is not None:
                parts.append(("key", f"{where}.key.value", tool.key.value))
            if isinstance(tool.lookup, Lookup):
                parts.append(("lookup", f"{where}.lookup.args", tool.lookup.args))
            if tool.compensation is not None:
                parts.append(("compensation", f"{where}.compensation.args",
                              tool.compensation.args))
            expressions = [(f"{where}.ref", tool.ref)]
            if isinstance(tool.lookup, Lookup):
                expressions += [(f"{where}.lookup.found", tool.lookup.found),
                                (f"{where}.lookup.ref", tool.lookup.ref)]
            for place, expression in expressions:
                try:
                    if expression is not None:
                        check_expression(expression)
                except TemplateError as exc:
                    problems.append(f"{place}: {exc}")
            for kind, place, value in parts:
                try:
                    check_template(value)
                except TemplateError as exc:
                    problems.append(f"{place}: {exc}")
                    continue
                for bad in sorted(_names(value) - _ALLOWED[kind]):
                    problems.append(f"{place}: unknown placeholder {bad!r}; a {kind} template "
                                    f"may use {', '.join(sorted(_ALLOWED[kind]))}")
    return problems


def parse(data: Any, source: str = "the upstreams file") -> UpstreamsFile:
    """Validate a parsed file; ConfigurationError lists every problem with its place."""
    try:
        doc = UpstreamsFile.model_validate(data)
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
                 for err in exc.errors()]
        raise ConfigurationError(f"{source} is not valid:\n" + "\n".join(lines)) from None
    problems = _check_templates(doc)
    if problems:
        raise ConfigurationError(f"{source} is not valid:\n" +
                                 "\n".join(f"  {p}" for p in problems))
    return doc


def load(path: str | Path) -> UpstreamsFile:
    """Read and validate the upstreams file (YAML or JSON)."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the MCP upstreams file {str(file)!r}: "
                                 f"{exc.strerror}") from None
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"the MCP upstreams file {str(file)!r} cannot be parsed: "
                                 f"{exc}") from None
    return parse(data, f"the MCP upstreams file {str(file)!r}")
