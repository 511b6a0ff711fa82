"""The upstreams file: every mistake named with its place; templates filled without eval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentsaga.connectors.mcp import declarations, templates
from agentsaga.connectors.mcp.registration import _place_key
from agentsaga.errors import ConfigurationError

GOOD: dict[str, Any] = {"upstreams": {"t": {"url": "http://127.0.0.1:1/mcp", "tools": {
    "create": {"class": "compensatable", "key": {"argument": "labels", "mode": "append",
                                                 "value": "saga-{key}"},
               "lookup": {"tool": "find", "args": {"label": "saga-{key}"}, "found": "items[0]"},
               "compensation": {"tool": "close", "args": {"id": "{ref}"}}},
    "close": {"class": "irreversible", "key": {"header": "Idempotency-Key"}, "lookup": "none"},
}}}}


def _with(tool: dict[str, Any]) -> dict[str, Any]:
    return {"upstreams": {"t": {"url": "http://x/mcp", "tools": {"x": tool}}}}


def test_a_good_file_parses() -> None:
    doc = declarations.parse(GOOD)
    tool = doc.upstreams["t"].tools["create"]
    assert tool.cls == "compensatable" and tool.time.call_timeout_s == 30.0


@pytest.mark.parametrize(("tool", "says"), [
    ({}, "class"),
    ({"class": "sometimes"}, "class"),
    ({"class": "compensatable", "lookup": "none", "key": {"argument": "a"}},
     "needs `compensation:`"),
    ({"class": "irreversible", "lookup": "none"}, "needs `key:`"),
    ({"class": "irreversible", "key": {"argument": "a"}}, "needs `lookup:`"),
    ({"class": "irreversible", "lookup": "none", "key": {"argument": "a", "header": "H"}},
     "exactly one of `argument`"),
    ({"class": "pure", "key": {"argument": "a"}}, "pure tool has nothing"),
    ({"class": "irreversible", "lookup": "none", "key": {"argument": "a", "value": "{nope}"}},
     "unknown placeholder 'nope'"),
    ({"class": "irreversible", "key": {"argument": "a"},
      "lookup": {"tool": "f", "found": "items[?"}}, "JMESPath"),
    ({"class": "irreversible", "lookup": "none", "key": {"argument": "a", "value": "{{ key"}},
     "Jinja2 syntax error"),
    ({"class": "pure", "colour": "red"}, "colour"),
])
def test_a_bad_declaration_is_refused_naming_its_place(tool: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        declarations.parse(_with(tool), "f.yaml")
    assert "upstreams.t.tools.x" in str(caught.value) and says in str(caught.value)


def test_an_upstream_needs_exactly_one_transport() -> None:
    with pytest.raises(ConfigurationError, match="exactly one of `url`"):
        declarations.parse({"upstreams": {"t": {"tools": {}}}})
    with pytest.raises(ConfigurationError, match="must start with http"):
        declarations.parse({"upstreams": {"t": {"url": "ftp://x"}}})


def test_an_unreadable_or_unparsable_file_says_which(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        declarations.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstreams: [unclosed")
    with pytest.raises(ConfigurationError, match="cannot be parsed"):
        declarations.load(bad)


def test_templates_fill_placeholders_keep_types_and_sandbox_jinja() -> None:
    context = {"key": "k1", "args": {"items": ["a"], "summary": "Refund"}}
    assert templates.render("saga-{key}", context) == "saga-k1"
    assert templates.render("{args.items}", context) == ["a"]
    assert templates.render({"x": ["{{ args.summary | upper }}"]}, context) == {"x": ["REFUND"]}
    with pytest.raises(templates.TemplateError):
        templates.render("{{ args.__class__.__mro__ }}", context)
    with pytest.raises(templates.TemplateError):
        templates.render("{args.missing}", context)


def test_the_key_is_set_appended_or_nested_where_declared() -> None:
    doc = declarations.parse(GOOD)
    create = doc.upstreams["t"].tools["create"]
    assert _place_key({"labels": ["x"]}, create, "k")["labels"] == ["x", "saga-k"]
    assert _place_key({}, create, "k")["labels"] == ["saga-k"]
    nested = declarations.parse(_with({"class": "irreversible", "lookup": "none",
                                       "key": {"argument": "metadata.saga_key"}}))
    tool = nested.upstreams["t"].tools["x"]
    assert _place_key({"metadata": {"a": "b"}}, tool, "k") == {"metadata": {"a": "b",
                                                                           "saga_key": "k"}}
