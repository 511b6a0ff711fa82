"""Stripe's request encoding and search query language, as the stand-in parses them.

`parse_form` turns the SDK's bracket-notation pairs (`metadata[saga_key]=k`, `expand[]=x`,
`created[gte]=1`) into nested values. `parse_search` reads the search language of
docs.stripe.com/search: up to 10 clauses `field op value`, joined by spaces, `AND` or `OR`
(case-insensitive, never mixed, no parentheses), `-` negates, string values quoted with ' or ",
backslash escapes a quote, `metadata['key']` for metadata.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_CLAUSES = 10
SEARCH_FIELDS = ("amount", "created", "currency", "customer", "metadata", "status")
NUMERIC_FIELDS = ("amount", "created")


class QueryError(ValueError):
    """The search query is malformed; the message is what Stripe's 400 would say."""


def parse_form(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Nest bracket keys: `a[b]=1` -> {"a": {"b": "1"}}, `a[]=x` -> {"a": ["x"]}, `a[0]=x` too."""
    out: dict[str, Any] = {}
    for raw_key, value in pairs:
        brackets = re.findall(r"\[([^\]]*)\]", raw_key)
        keys = [raw_key.split("[", 1)[0]] + [k or "[]" for k in brackets]
        node: Any = out
        for i, key in enumerate(keys):
            last = i == len(keys) - 1
            nxt = None if last else keys[i + 1]
            child_default: Any = [] if nxt == "[]" or (nxt is not None and nxt.isdigit()) else {}
            if isinstance(node, list):
                if key == "[]" or key.isdigit():
                    if last:
                        node.append(value)
                        break
                    node.append(child_default)
                    node = node[-1]
                    continue
                raise ValueError(f"cannot mix list and object keys in {raw_key!r}")
            if last:
                node[key] = value
            else:
                node = node.setdefault(key, child_default)
    return out


@dataclass(frozen=True)
class Clause:
    field: str
    key: str | None
    op: str
    value: str
    negated: bool = False

    def test(self, obj: dict[str, Any]) -> bool:
        return self._test(obj) != self.negated

    def _test(self, obj: dict[str, Any]) -> bool:
        if self.field == "metadata":
            have = (obj.get("metadata") or {}).get(self.key or "")
            if have is None:
                return False
            return have == self.value if self.op == ":" else self.value.lower() in have.lower()
        have_any = obj.get(self.field)
        if self.field in NUMERIC_FIELDS:
            a, b = int(have_any or 0), int(self.value)
            return {
                ":": a == b, "=": a == b, ">": a > b, "<": a < b, ">=": a >= b, "<=": a <= b
            }[self.op]
        text = "" if have_any is None else str(have_any)
        return text == self.value if self.op == ":" else self.value.lower() in text.lower()


@dataclass(frozen=True)
class Query:
    clauses: tuple[Clause, ...]
    join: str  # "AND" or "OR"

    def test(self, obj: dict[str, Any]) -> bool:
        results = (c.test(obj) for c in self.clauses)
        return any(results) if self.join == "OR" else all(results)


_FIELD = re.compile(r"[a-z_]+")
_OPS = (">=", "<=", ":", "~", ">", "<", "=")


def parse_search(text: str) -> Query:
    """Parse a search query for payment_intents; raises `QueryError` with Stripe-like wording."""
    pos, clauses, joins = 0, [], set()
    text = text.strip()
    if not text:
        raise QueryError("Search query is empty.")
    while pos < len(text):
        clause, pos = _clause(text, pos)
        clauses.append(clause)
        pos = _skip_space(text, pos)
        if pos >= len(text):
            break
        word = re.match(r"(?i)(and|or)\s+", text[pos:])
        if word:
            joins.add(word.group(1).upper())
            pos += word.end()
        else:
            joins.add("AND")
    if len(joins) > 1:
        raise QueryError("Search query is invalid: `AND` and `OR` cannot be mixed in one query.")
    if len(clauses) > MAX_CLAUSES:
        raise QueryError(
            f"Search query is invalid: a query can have at most {MAX_CLAUSES} clauses, "
            f"this one has {len(clauses)}."
        )
    return Query(tuple(clauses), joins.pop() if joins else "AND")


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _clause(text: str, pos: int) -> tuple[Clause, int]:
    negated = text.startswith("-", pos)
    pos += negated
    m = _FIELD.match(text, pos)
    if not m:
        raise QueryError(f"Search query is invalid: expected a field name at position {pos}.")
    field, pos = m.group(), m.end()
    if field not in SEARCH_FIELDS:
        raise QueryError(
            f"Search query is invalid: `{field}` is an unsupported search field for "
            "resource `payment_intents`."
        )
    key = None
    if field == "metadata":
        if not text.startswith("[", pos):
            raise QueryError("Search query is invalid: use metadata['key'] to search metadata.")
        key, pos = _quoted(text, pos + 1)
        if not text.startswith("]", pos):
            raise QueryError("Search query is invalid: expected `]` after the metadata key.")
        pos += 1
    op = next((o for o in _OPS if text.startswith(o, pos)), None)
    if op is None:
        raise QueryError(f"Search query is invalid: expected an operator after `{field}`.")
    pos += len(op)
    if op not in (":", "~") and field not in NUMERIC_FIELDS:
        raise QueryError(f"Search query is invalid: `{op}` is only allowed on numeric fields.")
    if pos < len(text) and text[pos] in "'\"":
        value, pos = _quoted(text, pos)
    else:
        m = re.compile(r"[^\s]+").match(text, pos)
        value = m.group() if m else ""
        pos = m.end() if m else pos
        if field not in NUMERIC_FIELDS or not re.fullmatch(r"-?\d+", value):
            raise QueryError(
                f"Search query is invalid: the value for `{field}` must be a quoted string."
            )
    if field in NUMERIC_FIELDS and not re.fullmatch(r"-?\d+", value):
        raise QueryError(f"Search query is invalid: `{field}` takes an integer value.")
    return Clause(field, key, op, value, negated), pos


def _quoted(text: str, pos: int) -> tuple[str, int]:
    if pos >= len(text) or text[pos] not in "'\"":
        raise QueryError("Search query is invalid: string values must be quoted.")
    quote, pos, out = text[pos], pos + 1, []
    while pos < len(text):
        ch = text[pos]
        if ch == "\\" and pos + 1 < len(text):
            out.append(text[pos + 1])
            pos += 2
            continue
        if ch == quote:
            return "".join(out), pos + 1
        out.append(ch)
        pos += 1
    raise QueryError("Search query is invalid: unterminated quoted string.")
