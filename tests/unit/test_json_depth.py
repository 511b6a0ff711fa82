"""The depth check of agents' JSON (`requests.check_depth`), before it is parsed: the deepest
nesting of brackets outside strings, against the nesting of the parsed value itself."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from agentsaga.errors import InvalidArguments
from agentsaga.service.requests import check_depth, loads

AWKWARD_STRINGS = ("[", "]]", "{{", "}", '"', '\\"]', "\\\\", "\\\\\"{", "a[b]{c}", "ü[", "")


def depth(value: Any) -> int:
    """How deep `value` nests: 1 for a flat object or list, 0 for a scalar."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def made(rng: random.Random, levels: int) -> Any:
    if levels == 0 or rng.random() < 0.25:
        return rng.choice([*AWKWARD_STRINGS, 1, 2.5, None, True])
    if rng.random() < 0.5:
        return [made(rng, levels - 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(AWKWARD_STRINGS) + str(i): made(rng, levels - 1)
            for i in range(rng.randint(0, 3))}


def accepted(text: str, limit: int) -> bool:
    try:
        check_depth(text, limit)
    except InvalidArguments as exc:
        assert f"nested more than {limit} levels deep" in str(exc)
        return False
    return True


def test_the_check_refuses_exactly_what_nests_deeper_than_the_limit() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        value = made(rng, rng.randint(1, 10))
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5)
        for limit in range(1, 11):
            assert accepted(text, limit) == (depth(value) <= limit), (text, limit)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"a": "[[[[[[[[[[{{{{{{{{{{", "b": ["]]]]]]\\\"[[[[[["]})
    check_depth(text, 2)
    with pytest.raises(InvalidArguments, match="nested more than 1 levels deep"):
        check_depth(text, 1)


def test_a_deep_nesting_is_refused_before_it_is_parsed() -> None:
    text = '{"summary": ' + "[" * 50000 + "]" * 50000 + "}"
    with pytest.raises(InvalidArguments, match="more than 64 levels deep"):
        loads(text, 64, "arguments")
