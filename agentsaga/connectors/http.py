"""Generic HTTP tools: wrap any JSON API by configuration alone (`AGENTSAGA_HTTP_TOOLS`).

A YAML or JSON file lists tools. `{name}` in a URL is filled from the call's arguments and
`{key}` with the step's idempotency key; strings in `compensate.args` may be `$key` (the step's
key) or `$ref` (the step's external id, resolved at unwind time, R8) or `{name}` templates.

    tools:
      - name: create_invoice
        class: compensatable            # R1: pure | reversible | compensatable | irreversible
        audience: [finance]             # R9
        method: POST
        url: https://billing.example.com/invoices
        key_header: Idempotency-Key     # R4: the header that carries the key (default)
        key_field: saga_key             # optional: also put the key into the JSON body (dots nest)
        id_field: id                    # where the external id is in the answer (dots nest)
        auth_env: BILLING_TOKEN         # optional: `Authorization: Bearer` from NAME(_FILE)
        lookup:                         # R7: find the effect by key (an empty list: not found)
          url: https://billing.example.com/invoices?saga_key={key}
          items: data                   # where the list is in the answer ("" : the answer)
          id_field: id                  # the id within one item (default: id_field)
        compensate: {tool: void_invoice, args: {invoice: $ref, reason: rolled back}}
        time: {visible_within_s: 0, dedupes_for_s: 86400}   # R7: what the API documents
      - name: void_invoice
        class: irreversible
        method: POST
        url: https://billing.example.com/invoices/{invoice}/void

The time contract (R7): `call_timeout_s` is the connector's client timeout
(`AGENTSAGA_CONNECTOR_TIMEOUT_S`); a lookup by key in the API's own list is taken as consistent
(`visible_within_s: 0`) and the key as not deduplicated (`dedupes_for_s: 0`) unless `time:` says
what the API documents.

Arguments not used in the URL are sent as the JSON body (POST/PUT/PATCH) or query (GET/DELETE).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentsaga.connectors.config import HttpSettings
from agentsaga.connectors.json_api import JsonApi, with_backoff
from agentsaga.connectors.paths import segment
from agentsaga.errors import ConfigurationError
from agentsaga.saga.registry import JSON, NO_LOOKUP, Compensation, Effect, Registry, ref
from agentsaga.settings import read_secret
from agentsaga.time_contract import TimeContract

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclass(frozen=True)
class HttpTool:
    name: str
    cls: str
    method: str
    url: str
    audience: tuple[str, ...] = ("agent",)
    key_header: str = "Idempotency-Key"
    key_field: str = ""
    id_field: str = "id"
    auth_env: str = ""
    lookup_url: str = ""
    lookup_items: str = ""
    lookup_id_field: str = ""
    compensate: Mapping[str, Any] | None = None
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    time: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> HttpTool:
        try:
            name = str(raw["name"])
            tool = cls(
                name=name, cls=str(raw["class"]), method=str(raw.get("method", "POST")).upper(),
                url=str(raw["url"]), audience=tuple(raw.get("audience") or ("agent",)),
                key_header=str(raw.get("key_header", "Idempotency-Key")),
                key_field=str(raw.get("key_field", "")), id_field=str(raw.get("id_field", "id")),
                auth_env=str(raw.get("auth_env", "")),
                lookup_url=str((raw.get("lookup") or {}).get("url", "")),
                lookup_items=str((raw.get("lookup") or {}).get("items", "")),
                lookup_id_field=str((raw.get("lookup") or {}).get("id_field", "")),
                compensate=raw.get("compensate"), description=str(raw.get("description", "")),
                time=dict(raw.get("time") or {}),
            )
        except KeyError as exc:
            raise ConfigurationError(f"HTTP tool {dict(raw).get('name', '?')!r}: missing "
                                     f"field {exc.args[0]!r}") from None
        if not _NAME.match(name):
            raise ConfigurationError(f"HTTP tool name {name!r} is not an identifier")
        comp = tool.compensate
        if comp is not None and not (isinstance(comp, Mapping) and "tool" in comp):
            raise ConfigurationError(f"HTTP tool {name!r}: compensate needs tool: and args:")
        return tool


def _dig(value: Any, path: str) -> Any:
    for part in [p for p in path.split(".") if p]:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _put(target: dict[str, Any], path: str, value: Any) -> None:
    """Set `value` at a dotted path, copying the nested objects on the way (args stay as sent)."""
    head, _, tail = path.partition(".")
    if not tail:
        target[head] = value
        return
    inner = dict(target.get(head) or {})
    _put(inner, tail, value)
    target[head] = inner


def _fill(template: str, values: Mapping[str, Any], *,
          url: bool = False) -> tuple[str, set[str]]:
    """`template` with its `{name}` fields filled; in a URL each value is percent-encoded whole
    (a model's `../admin?x=` stays one path segment or query value)."""
    used = {f for _, f, _, _ in string.Formatter().parse(template) if f}
    missing = used - set(values)
    if missing:
        raise KeyError(f"the URL needs {sorted(missing)}")
    filled = {k: segment(values[k]) if url else values[k] for k in used}
    return template.format(**filled), used


def _comp_value(value: Any, args: JSON, key: str) -> Any:
    if value == "$key":
        return key
    if value == "$ref":
        return ref(key)
    if isinstance(value, str) and "{" in value:
        return _fill(value, {**args, "key": key})[0]
    if isinstance(value, Mapping):
        return {k: _comp_value(v, args, key) for k, v in value.items()}
    return value


class HttpToolRunner:
    def __init__(self, tool: HttpTool, settings: HttpSettings, env: Mapping[str, str]) -> None:
        self.tool = tool
        token = read_secret(env, tool.auth_env) if tool.auth_env else None
        if tool.auth_env and not token:
            raise ConfigurationError(f"HTTP tool {tool.name!r}: {tool.auth_env}(_FILE) is unset")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.api = JsonApi(f"http:{tool.name}", "", settings, headers=headers)

    def __call__(self, idempotency_key: str | None = None, **args: Any) -> Effect:
        url, used = _fill(self.tool.url, {**args, "key": idempotency_key or ""}, url=True)
        rest = {k: v for k, v in args.items() if k not in used}
        if self.tool.key_field and idempotency_key:
            _put(rest, self.tool.key_field, idempotency_key)
        headers = {self.tool.key_header: idempotency_key} if idempotency_key else {}
        if self.tool.method in ("POST", "PUT", "PATCH"):
            answer = self.api.call(self.tool.method, url, json_body=rest, headers=headers)
        else:
            answer = self.api.call(self.tool.method, url, params=rest, headers=headers)
        found = _dig(answer, self.tool.id_field)
        return Effect(None if found is None else str(found),
                      answer if isinstance(answer, dict) else {"answer": answer})

    def lookup(self, key: str) -> Effect | None:
        url, _ = _fill(self.tool.lookup_url, {"key": key}, url=True)
        answer = with_backoff(lambda: self.api.call("GET", url, search=True),
                              self.api.settings, f"{self.tool.name} lookup",
                              sleep=self.api.sleep)
        items = _dig(answer, self.tool.lookup_items) if self.tool.lookup_items else answer
        rows = items if isinstance(items, list) else ([items] if items else [])
        if not rows:
            return None
        found = _dig(rows[0], self.tool.lookup_id_field or self.tool.id_field)
        return Effect(None if found is None else str(found), dict(rows[0]))


def _bind(runner: HttpToolRunner) -> Callable[..., Effect]:
    def call(**args: Any) -> Effect:
        return runner(**args)
    return call


def load(path: str) -> list[HttpTool]:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigurationError(f"AGENTSAGA_HTTP_TOOLS={path!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"AGENTSAGA_HTTP_TOOLS={path!r} is not YAML/JSON: {exc}") from None
    entries = raw.get("tools") if isinstance(raw, Mapping) else raw
    if not isinstance(entries, list):
        raise ConfigurationError(f"{path}: expected a list of tools under `tools:`")
    return [HttpTool.parse(entry) for entry in entries]


def register_file(registry: Registry, path: str, settings: HttpSettings,
                  env: Mapping[str, str]) -> list[str]:
    """Register every tool of the file; returns their names."""
    names = []
    for tool in load(path):
        runner = HttpToolRunner(tool, settings, env)
        compensate: Callable[[JSON, str], Compensation] | None = None
        if tool.compensate is not None:
            spec = tool.compensate

            def compensate(args: JSON, key: str, spec: Mapping[str, Any] = spec) -> Compensation:
                return Compensation(str(spec["tool"]),
                                    _comp_value(dict(spec.get("args") or {}), args, key))

        lookup: Any = None
        if tool.cls != "pure":
            lookup = runner.lookup if tool.lookup_url else NO_LOOKUP

        timing = TimeContract(settings.timeout_s).with_overrides(tool.time)
        registry.register(_bind(runner), cls=tool.cls, name=tool.name, audience=tool.audience,
                          compensate=compensate, lookup=lookup, timing=timing,
                          description=tool.description or f"{tool.method} {tool.url}")
        names.append(tool.name)
    return names
