"""Arguments from templates, results read by JMESPath; no `eval` anywhere.

A string value in a declaration is a template:

    "saga-{key}"            plain placeholders: `{key}`, `{args.summary}`, `{ref}`, `{result.id}`
    "{args.items}"          a lone placeholder keeps the value's type (a list stays a list)
    "{{ args.summary | upper }} ({{ key }})"
                            Jinja2 in a sandbox (no attribute access to Python internals)

Other values (numbers, lists, objects) are walked and their strings rendered the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jinja2
import jmespath
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jmespath.exceptions import JMESPathError

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\}")
_JINJA = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)


class TemplateError(ValueError):
    """A template that cannot be parsed or filled in."""


class _Later:
    """A value known only later (a compensation's `ref` and `result`, before the forward call
    has happened): any part of it reads as itself, and it renders as nothing. Filling a
    template with it checks every other part now."""

    def __getattr__(self, name: str) -> _Later:
        return self

    def __getitem__(self, key: object) -> _Later:
        return self

    def __str__(self) -> str:
        return ""


LATER = _Later()


def is_jinja(text: str) -> bool:
    return "{{" in text or "{%" in text


def placeholders(text: str) -> list[str]:
    """The dotted names a template refers to."""
    if is_jinja(text):
        try:
            ast = _JINJA.parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"Jinja2 syntax error in {text!r}: {exc.message}") from None
        from jinja2 import meta
        return sorted(meta.find_undeclared_variables(ast))
    return PLACEHOLDER.findall(text)


def check_template(value: Any) -> None:
    """Raise TemplateError if any string in `value` cannot be parsed."""
    if isinstance(value, str):
        placeholders(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            check_template(v)
    elif isinstance(value, list):
        for v in value:
            check_template(v)


def _dig(context: Mapping[str, Any], path: str) -> Any:
    value: Any = context
    for part in path.split("."):
        if isinstance(value, _Later):
            return value
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise TemplateError(f"{{{path}}} has no value here (no {part!r})")
    return value


def render(value: Any, context: Mapping[str, Any]) -> Any:
    """Fill in every template in `value` from `context`."""
    if isinstance(value, str):
        return render_text(value, context)
    if isinstance(value, Mapping):
        return {k: render(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, context) for v in value]
    return value


def render_text(text: str, context: Mapping[str, Any]) -> Any:
    if is_jinja(text):
        try:
            return _JINJA.from_string(text).render(**context)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"cannot render {text!r}: {exc}") from None
    whole = PLACEHOLDER.fullmatch(text)
    if whole:
        return _dig(context, whole.group(1))
    return PLACEHOLDER.sub(lambda m: str(_dig(context, m.group(1))), text)


def read(expression: str, data: Any) -> Any:
    """A JMESPath expression over a result."""
    try:
        return jmespath.search(expression, data)
    except JMESPathError as exc:
        raise TemplateError(f"JMESPath {expression!r}: {exc}") from None


def check_expression(expression: str) -> None:
    try:
        jmespath.compile(expression)
    except JMESPathError as exc:
        raise TemplateError(f"JMESPath {expression!r} cannot be parsed: {exc}") from None
