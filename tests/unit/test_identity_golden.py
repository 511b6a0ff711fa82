"""Golden values for the two identities a run hands to the outside world: the step key (R3),
under which a real system deduplicates a call, and the plan hash (R10), which a human approves.
Each value was computed once (the step keys also with `sha256sum`) and is written here as a
literal: a change to either derivation breaks runs already in flight, so it must break a test."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsaga import compensation_key, step_key
from agentsaga.pivot import plan_hash

# step_key("refund-1182", 2, "create_ticket") and one input changed at a time
STEP_KEYS = [
    (("refund-1182", 2, "create_ticket"), "61076767be19b54756da90c69850c4be"),
    (("refund-1183", 2, "create_ticket"), "65190a1ed07fdcee00d523f9c74d27f2"),  # run id
    (("refund-1182:2", 2, "create_ticket"), "9eb63a388c32977bd1b360e79982381b"),  # run id
    (("refund-1182", 3, "create_ticket"), "88ab2ee5eb5d11cd2d636342be95b43e"),  # step
    (("refund-1182", 12, "create_ticket"), "c25ce2d9af8b7f3f42d2a9013df77fe5"),  # step
    (("refund-1182", 2, "charge_card"), "435828e6bdf4e0550268873e3d8071b3"),  # tool
]


@pytest.mark.parametrize(("inputs", "expected"), STEP_KEYS, ids=[k for _, k in STEP_KEYS])
def test_step_key_is_the_golden_value(inputs: tuple[str, int, str], expected: str) -> None:
    assert step_key(*inputs) == expected


def test_compensation_key_is_the_golden_value() -> None:
    """R8: `sha256("refund-1182:2:compensate:create_ticket")[:32]`."""
    assert compensation_key("refund-1182", 2, "create_ticket") == (
        "72374384474b0d4fef7334f138b3338d")


STAGED: list[dict[str, Any]] = [
    {"step": 0, "tool": "create_ticket", "class": "compensatable", "status": "CONFIRMED",
     "audience": ["customer"], "externalRef": "SUP-1"}]
COMMIT: list[dict[str, Any]] = [
    {"tool": "send_email", "args": {"to": "c@x", "body": "b"}, "class": "irreversible",
     "audience": ["customer"]}]
PLAN_HASH = "f6a1e583fa06fbe8"

# (which list, field, new value) -> the plan hash with that one field changed
PLAN_VARIATIONS = [
    ("staged", "step", 1, "995a45392eac56fa"),
    ("staged", "tool", "charge_card", "cdc1387017006878"),
    ("staged", "class", "reversible", "3ecaa5dea2355f63"),
    ("staged", "status", "FAILED", "c5919f2d516cd5cb"),
    ("staged", "audience", ["internal"], "3280fc0435f8c2e0"),
    ("staged", "externalRef", "SUP-2", "e1ccf9457d3dd2dd"),
    ("commit", "tool", "send_sms", "ca80acd3a31b904a"),
    ("commit", "args", {"to": "c@x", "body": "B"}, "966da717e3e1e4e3"),
    ("commit", "class", "compensatable", "8ce5bf852490725f"),
    ("commit", "audience", ["public"], "34bf917327a8de54"),
]


def test_plan_hash_is_the_golden_value() -> None:
    assert plan_hash(STAGED, COMMIT) == PLAN_HASH


@pytest.mark.parametrize(("part", "field", "value", "expected"), PLAN_VARIATIONS,
                         ids=[f"{p}.{f}" for p, f, _, _ in PLAN_VARIATIONS])
def test_each_plan_field_changes_the_hash(part: str, field: str, value: object,
                                          expected: str) -> None:
    staged, commit = copy.deepcopy(STAGED), copy.deepcopy(COMMIT)
    (staged if part == "staged" else commit)[0][field] = value
    assert plan_hash(staged, commit) == expected


def test_where_a_step_sits_in_the_plan_changes_the_hash() -> None:
    """The same steps as done so far, or as still to come, are another plan."""
    assert plan_hash([], []) == "3b9c3b0a2a1b418e"  # sha256('{"commit":[],"staged":[]}')
    assert plan_hash([], STAGED + COMMIT) == "5b495b995bd70599"
    assert plan_hash(STAGED + COMMIT, []) == "0f1cf73468cce8d2"


def test_the_order_of_keys_in_a_step_does_not_change_the_hash() -> None:
    """The hash is over canonical JSON: the same plan read back from the database (its keys in
    another order) is the same plan."""
    reordered = [dict(reversed(list(step.items()))) for step in COMMIT]
    reordered[0]["args"] = {"body": "b", "to": "c@x"}
    assert plan_hash(STAGED, reordered) == PLAN_HASH
