"""A tool's arguments, typed (R2: checked before the intent): one JSON Schema per tool, derived
by pydantic from the signature's type hints, offered by every front end (gRPC ListTools, MCP
`inputSchema`), and the same types validated strictly before the INTENDED row is written.

    check_arguments   a missing or unknown argument, a float where an int is annotated, a
                      string where a number is, a value outside a Literal or a constraint ...
                      -> InvalidArguments naming the argument and what it must be; nothing
                      is written and nothing called; then the tool's own check of its
                      arguments together (`check=`, e.g. Stripe's minimum per currency)
    input_schema      the JSON Schema of the arguments (without the harness's idempotency_key)

Strict, in JSON mode: the arguments arrived as JSON, so a string is never read as a number and
1999.5 is never cut to 1999, while what JSON has no type for (an enum, a date) is read from its
JSON form. A tool that declares its schema (an upstream MCP tool carries the one its server
listed) is offered with it and checked against it the same way, by the `jsonschema` library;
an argument without a type hint takes any JSON value.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from agentsaga.errors import InvalidArguments
from agentsaga.redact import clip, redact_text, redact_value
from agentsaga.saga.argument_types import HARNESS_ARGUMENT, arguments_adapter, signature_schema
from agentsaga.saga.registry import JSON, ToolSpec

__all__ = ["CALL_AGAIN", "HARNESS_ARGUMENT", "check_arguments", "describe", "input_schema"]

CALL_AGAIN = " Nothing was called; call it again with corrected arguments."


def input_schema(spec: ToolSpec) -> JSON:
    """The tool's JSON Schema: the one its function declares, else one from its signature."""
    declared = getattr(spec.fn, "input_schema", None)
    if isinstance(declared, dict):
        return declared
    return signature_schema(spec.fn, spec.cls == "pure")


def check_arguments(spec: ToolSpec, args: JSON) -> None:
    """Refuse arguments the tool cannot take, before anything is written: InvalidArguments
    names the tool, each wrong argument and what it must be."""
    if HARNESS_ARGUMENT in args and spec.cls != "pure":
        raise InvalidArguments(f"{HARNESS_ARGUMENT} is set by the harness, never by the agent "
                               "(R3)")
    declared = getattr(spec.fn, "input_schema", None)
    if isinstance(declared, dict):  # an upstream MCP tool: the schema its server listed
        problems = declared_problems(declared, args)
        if problems:
            raise InvalidArguments(f"tool {spec.name!r}: " + "; ".join(problems)
                                   + "." + CALL_AGAIN)
        return
    adapter = arguments_adapter(spec.fn, spec.cls == "pure")
    if adapter is not None:
        try:
            adapter.validate_json(json.dumps(args), strict=True)
        except ValidationError as exc:
            properties = signature_schema(spec.fn, spec.cls == "pure").get("properties") or {}
            problems = [_problem(error, properties) for error in exc.errors()]
            raise InvalidArguments(f"tool {spec.name!r}: " + "; ".join(problems)
                                   + "." + CALL_AGAIN) from None
    if spec.check is not None:  # the arguments together, once each is of its type
        try:
            spec.check(args)
        except ValueError as exc:
            # masked: the message reaches the agent, and may reach a log or a span
            said = redact_text(str(exc))
            raise InvalidArguments(f"tool {spec.name!r}: {said}." + CALL_AGAIN) from None


def declared_problems(schema: JSON, args: JSON) -> list[str]:
    """What `args` break of a schema a tool's server declared (JSON Schema, validated by the
    `jsonschema` library, the dialect its `$schema` names); none when the schema itself cannot
    be read (its server then checks alone). `jsonschema` is imported here: only tools of an
    upstream MCP server declare a schema, and a sidecar without them does not hold it
    (2.9 MiB of RSS)."""
    import jsonschema

    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        errors = sorted(validator.iter_errors(args), key=lambda e: [str(p) for p in e.path])
    except jsonschema.SchemaError:
        return []
    problems = []
    for error in errors:
        where = ".".join(str(part) for part in error.path) or "(arguments)"
        # masked before it is cut: the message quotes the value, and reaches the agent
        problems.append(f"argument {where!r}: {clip(redact_text(error.message), 120)}")
    return problems


def _problem(error: Any, properties: JSON) -> str:
    """One validation error as a person reads it: the argument, what it must be, what came."""
    where = ".".join(str(part) for part in error.get("loc") or ()) or "(arguments)"
    name = str((error.get("loc") or ("",))[0])
    kind = error.get("type", "")
    if kind == "missing":
        return f"argument {where!r} is missing; it must be {describe(properties.get(name))}"
    if kind == "extra_forbidden":
        takes = ", ".join(sorted(properties)) or "none"
        return f"argument {where!r} is not an argument of this tool (it takes: {takes})"
    # masked before it is cut: the message reaches the agent, and may reach a log or a span
    shown = clip(json.dumps(redact_value(error.get("input")), default=str), 60)
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    return (f"argument {where!r} must be {describe(properties.get(name))}, got {shown} "
            f"({message})")


_JSON_WORDS = {"integer": "an integer", "number": "a number", "string": "a string",
               "boolean": "true or false", "object": "a JSON object", "array": "a list",
               "null": "null"}


def describe(schema: Any) -> str:
    """What a JSON Schema admits, in words: 'an integer ≥ 50', 'one of "usd", "eur"'."""
    if not isinstance(schema, dict) or not schema:
        return "any JSON value"
    if "enum" in schema and len(schema["enum"]) > 8 and schema.get("description"):
        return str(schema["description"])
    if "enum" in schema:
        values = schema["enum"]
        head = ", ".join(json.dumps(v) for v in values[:8])
        return f"one of {head}" + (f" (and {len(values) - 8} more)" if len(values) > 8 else "")
    if "const" in schema:
        return json.dumps(schema["const"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(describe(option) for option in schema[key])
    text = _JSON_WORDS.get(str(schema.get("type")), "a value")
    if "minimum" in schema and "maximum" in schema:
        return f"{text} from {schema['minimum']} to {schema['maximum']}"
    bounds = [f"≥ {schema['minimum']}" if "minimum" in schema else "",
              f"≤ {schema['maximum']}" if "maximum" in schema else "",
              f"> {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else "",
              f"< {schema['exclusiveMaximum']}" if "exclusiveMaximum" in schema else ""]
    shown = " ".join(b for b in bounds if b)
    return f"{text} {shown}" if shown else text


def args_too_large(size: int, limit: int) -> str:
    """What arguments of `size` bytes over AGENTSAGA_MAX_ARGS_BYTES are told, at a dispatch and
    at staging alike; empty when they are within it."""
    if size <= limit:
        return ""
    return (f"arguments are {size} bytes; the limit is {limit} (AGENTSAGA_MAX_ARGS_BYTES). "
            "Pass large content by reference (a URL or an id), not inline.")


def check_args_size(size: int, limit: int) -> None:
    problem = args_too_large(size, limit)
    if problem:
        raise InvalidArguments(problem)


def sent_size(args: JSON) -> int:
    """The bytes of `args` as a dispatch will measure them when SagaClient or the MCP endpoint
    sends them (`json.dumps`, ASCII with escapes): a commit step whose arguments are over the
    limit so sent is refused when the plan is staged, not after its approval."""
    return len(json.dumps(args).encode())
