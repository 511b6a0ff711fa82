"""Hold HTTP exchanges to a vendor's OpenAPI description (an excerpt in this folder, cut by
tools/extract_openapi.py), with `jsonschema`.

    contract = Contract.load("stripe")
    problems = contract.check(exchange)      # [] when request and answer are both allowed

OpenAPI 3.0 schemas are JSON Schema with a few differences, converted once on load: `nullable`
becomes `anyOf [..., null]`, boolean `exclusiveMinimum`/`exclusiveMaximum` become numbers;
`x-*` keywords are ignored. Requests are checked for their path and method, their query and
header parameters (an undocumented query parameter is a problem), and their body: JSON as
sent, form bodies (Stripe) decoded from bracket notation and their strings read as the schema's
integers and booleans. Answers are checked against the schema of their status (or `default`);
an undocumented status is a problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from agentsaga_lab.world.exchanges import Exchange

HERE = Path(__file__).resolve().parent
BASE = "urn:contract"


def to_json_schema(node: Any) -> Any:
    """An OpenAPI 3.0 document with its schemas made plain JSON Schema (2020-12)."""
    if isinstance(node, list):
        return [to_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items()}
    for bound, edge in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), bool) and out.pop(bound) and edge in out:
            out[bound] = out.pop(edge)
    if out.get("nullable") is True:
        del out["nullable"]
        return {"anyOf": [out, {"type": "null"}]}
    return out


def absolute_refs(node: Any) -> Any:
    """`#/components/...` -> `urn:contract#/components/...`, so any subschema resolves alone."""
    if isinstance(node, list):
        return [absolute_refs(v) for v in node]
    if isinstance(node, dict):
        return {k: (BASE + v if k == "$ref" and isinstance(v, str) and v.startswith("#")
                    else absolute_refs(v)) for k, v in node.items()}
    return node


def _local(ref: str) -> str:
    return ref[len(BASE):] if ref.startswith(BASE) else ref


def _pointer(*parts: str) -> str:
    return "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def decode_form(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """`a[b][]=1&a[b][]=2&c=3` -> {"a": {"b": ["1", "2"]}, "c": "3"} (Stripe's encoding)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        names = [key.split("[", 1)[0], *re.findall(r"\[([^\]]*)\]", key)]
        node: Any = out
        for i, name in enumerate(names):
            last = i == len(names) - 1
            if isinstance(node, list):
                if last:
                    node.append(value)
                else:
                    node.append([] if names[i + 1] == "" else {})
                    node = node[-1]
                continue
            if last:
                node[name] = value
            else:
                node = node.setdefault(name, [] if names[i + 1] == "" else {})
    return out


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    pointer: str
    spec: dict[str, Any]


class Contract:
    """One vendor's excerpt, ready to check exchanges against."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.source = document.get("x-source", {})
        self.doc = absolute_refs(to_json_schema(
            {k: v for k, v in document.items() if k != "x-source"}))
        self.registry: Registry[Any] = Registry().with_resource(
            BASE, Resource.from_contents(self.doc, default_specification=DRAFT202012))
        self.operations: list[Operation] = []
        for template, item in self.doc["paths"].items():
            for method, spec in item.items():
                if method in ("get", "post", "put", "delete", "patch"):
                    shared = item.get("parameters", [])
                    spec = {**spec, "parameters": [*shared, *spec.get("parameters", [])]}
                    self.operations.append(Operation(method.upper(), template,
                                                     _pointer("paths", template, method), spec))
        # literal paths before templated ones: /v1/payment_intents/search is not {intent}
        self.operations.sort(key=lambda op: op.template.count("{"))

    @classmethod
    def load(cls, name: str) -> Contract:
        return cls(json.loads((HERE / f"{name}.openapi.json").read_text()))

    # --- lookup ------------------------------------------------------------------------------

    def operation(self, method: str, path: str) -> Operation | None:
        for op in self.operations:
            pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(op.template))
            if op.method == method and re.fullmatch(pattern, path):
                return op
        return None

    def resolve(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            node = self.registry.resolver(BASE).lookup(node["$ref"]).contents
        return node

    def problems(self, pointer: str, instance: Any) -> list[str]:
        validator = Draft202012Validator({"$ref": BASE + pointer}, registry=self.registry)
        return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
                for e in validator.iter_errors(instance)]

    # --- checks --------------------------------------------------------------------------------

    def check(self, exchange: Exchange) -> list[str]:
        """Problems with this request and its answer ([] when both are what the spec allows)."""
        op = self.operation(exchange.method, exchange.path)
        where = f"{exchange.method} {exchange.path}"
        if op is None:
            return [f"{where}: no such operation in {self.source.get('repository')}"]
        found = [f"{where} request: {p}" for p in self.check_request(op, exchange)]
        found += [f"{where} -> {exchange.status}: {p}" for p in self.check_response(op, exchange)]
        return found

    def check_request(self, op: Operation, exchange: Exchange) -> list[str]:
        found: list[str] = []
        params = [self.resolve(p) for p in op.spec.get("parameters", [])]
        query = decode_form(exchange.query)
        known = {p["name"] for p in params if p["in"] == "query"}
        found += [f"query parameter {name!r} is not documented" for name in query
                  if name not in known]
        for index, param in enumerate(op.spec.get("parameters", [])):
            spec = self.resolve(param)
            pointer = f"{op.pointer}/parameters/{index}"
            if "$ref" in param:
                pointer = _local(param["$ref"])
            if spec["in"] == "query":
                value = query.get(spec["name"])
                plain = [v for k, v in exchange.query if k == spec["name"]]
                if plain and self.resolve(spec.get("schema", {})).get("type") == "array":
                    value = [part for v in plain for part in v.split(",")]  # a,b or a&a
            elif spec["in"] == "header":
                value = exchange.header(spec["name"])
            else:
                continue
            if value is None:
                if spec.get("required"):
                    found.append(f"required {spec['in']} parameter {spec['name']!r} is missing")
                continue
            schema = spec.get("schema", {})
            found += [f"{spec['in']} {spec['name']}: {p}" for p in
                      self.problems(pointer + "/schema", self.coerce(value, schema))]
        body = op.spec.get("requestBody")
        if body is None:
            if exchange.body and exchange.method != "GET":
                found.append("the operation takes no body, yet one was sent")
            return found
        body = self.resolve(body)
        content = body.get("content", {})
        kind = (exchange.header("Content-Type") or "").split(";")[0].strip()
        if kind not in content:
            if exchange.body or body.get("required"):
                found.append(f"body of type {kind!r}; the spec documents {sorted(content)}")
            return found
        schema_ptr = f"{op.pointer}/requestBody/content/{kind.replace('/', '~1')}/schema"
        schema = content[kind].get("schema", {})
        if kind == "application/x-www-form-urlencoded":
            instance = self.coerce(decode_form(parse_qsl(exchange.body.decode(),
                                                         keep_blank_values=True)), schema)
        else:
            instance = json.loads(exchange.body or b"null")
        found += [f"body {p}" for p in self.problems(schema_ptr, instance)]
        return found

    def check_response(self, op: Operation, exchange: Exchange) -> list[str]:
        responses = op.spec.get("responses", {})
        status = str(exchange.status)
        key = next((k for k in (status, f"{status[0]}XX", "default") if k in responses), None)
        if key is None:
            return [f"status {status} is not documented (documented: {sorted(responses)})"]
        response = self.resolve(responses[key])
        content = response.get("content", {})
        if not content:  # the description says nothing of the body: nothing to hold it to
            return []
        kind = next((k for k in content if "json" in k), None)
        if kind is None or "schema" not in content[kind]:
            return []
        if exchange.status == 204:
            return [] if not exchange.response_body else ["a 204 answer with a body"]
        try:
            body = json.loads(exchange.response_body)
        except ValueError:
            return [f"the body is not JSON: {exchange.response_body[:80]!r}"]
        pointer = (_local(responses[key]["$ref"]) if "$ref" in responses[key]
                   else f"{op.pointer}/responses/{key}")
        return self.problems(f"{pointer}/content/{kind.replace('/', '~1')}/schema", body)

    def coerce(self, value: Any, schema: Any) -> Any:
        """Form strings as the schema's types: "500" -> 500 where an integer is expected."""
        schema = self.resolve(schema)
        if not isinstance(schema, dict):
            return value
        for branch in schema.get("anyOf", []) + schema.get("oneOf", []):
            candidate = self.coerce(value, branch)
            validator = Draft202012Validator(branch, registry=self.registry)
            if candidate is not value and validator.is_valid(candidate):
                return candidate
        kind = schema.get("type")
        if isinstance(value, str):
            if kind == "integer" and re.fullmatch(r"-?\d+", value):
                return int(value)
            if kind == "number" and re.fullmatch(r"-?\d+(\.\d+)?", value):
                return float(value)
            if kind == "boolean" and value in ("true", "false"):
                return value == "true"
        if isinstance(value, dict) and kind == "array" and all(k.isdigit() for k in value):
            value = [value[k] for k in sorted(value, key=int)]
        if isinstance(value, list) and kind == "array":
            return [self.coerce(v, schema.get("items", {})) for v in value]
        if isinstance(value, dict):
            props = schema.get("properties", {})
            extra = schema.get("additionalProperties", {})
            return {k: self.coerce(v, props.get(k, extra if isinstance(extra, dict) else {}))
                    for k, v in value.items()}
        return value
