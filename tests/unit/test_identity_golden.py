"""Golden values for the two identities a run hands to the outside world: the step key (R3),
under which a real system deduplicates a call, and the plan hash (R10), which a human approves.
Each value was computed once (the step keys also with `sha256sum`) and is written here as a
literal: a change to either derivation breaks runs already in flight, so it must break a test."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsaga import compensation_key, step_key
from agentsaga.keys import log_run_id, split_log_run_id
from agentsaga.saga.pivot import args_digest, plan_hash

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


# a run of a Kubernetes namespace is known to the saga log, and keyed, as `namespace/run-id`
LOG_RUN_IDS = [
    (("shop", "refund-1182"), "shop/refund-1182"),
    (("", "refund-1182"), "refund-1182"),  # outside Kubernetes: the bare id
    (("shop", "shop/refund-1182"), "shop/refund-1182"),  # already qualified: as it is
]


@pytest.mark.parametrize(("parts", "expected"), LOG_RUN_IDS, ids=[i for _, i in LOG_RUN_IDS])
def test_a_runs_log_id_is_the_golden_value(parts: tuple[str, str], expected: str) -> None:
    assert log_run_id(*parts) == expected


def test_a_log_id_splits_into_namespace_and_run_id() -> None:
    assert split_log_run_id("shop/refund-1182") == ("shop", "refund-1182")
    assert split_log_run_id("refund-1182") == ("", "refund-1182")


ARGS = {"to": "c@x", "body": "b"}
ARGS_DIGEST = "4e1cd56ca59aa6b4a70880bf4e0239d321e90375ceb2e5ebde61ea9d6260954c"
"""sha256('{"body":"b","to":"c@x"}'): canonical JSON, keys sorted, no spaces (the digest of a
plan staged before runs had a digest key: such runs in flight are still admitted)."""
DIGEST_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
"""base64url of the bytes 0x00..0x1f."""
KEYED_DIGEST = "1173d97ed3ed4514e7e3a31929abbd37e4d892bf2c86e0efe8d4a47c7bbe1641"
"""HMAC-SHA-256 of the same canonical JSON under DIGEST_KEY (also computed with
`openssl dgst -sha256 -mac HMAC -macopt hexkey:000102...1f`)."""

STAGED: list[dict[str, Any]] = [
    {"step": 0, "tool": "create_ticket", "class": "compensatable", "status": "CONFIRMED",
     "audience": ["customer"], "externalRef": "SUP-1"}]
COMMIT: list[dict[str, Any]] = [
    {"tool": "send_email", "args": ARGS, "argsDigest": ARGS_DIGEST, "class": "irreversible",
     "audience": ["customer"]}]
PLAN_HASH = "b85fd43e15e933778a6ceccae9c4ca6ddbd4de05aa677563dcb281f1b95f811c"
"""sha256 of the canonical {"commit": COMMIT, "staged": STAGED}, each commit step whole: its
arguments as shown and its digest (also computed with `sha256sum`). Plans staged before the hash
covered the shown arguments (it named a commit step by its digest alone) hash otherwise: such a
plan still awaiting approval is refused and must be staged again."""

# (which list, field, new value) -> the plan hash with that one field changed
PLAN_VARIATIONS = [
    ("staged", "step", 1, "4edeb352acf1637ffd32e354eaf5df134539c2786292534b39c0b833d3741d1b"),
    ("staged", "tool", "charge_card",
     "c2021db43152ed04cc76ad1acf1ec3d341325876dff68e9d081ae69792877e95"),
    ("staged", "class", "reversible",
     "8d0f3c5bbc6814625273f64b026f14bdbfb0b7fcdbdd7f9e52ee064307fa171c"),
    ("staged", "status", "FAILED",
     "d541b016b5b0fc26cc2ce175ea8165ed99976c3aa643daab01886c5b9677abaf"),
    ("staged", "audience", ["internal"],
     "7e8ddba3305860c168a8b8441df2e249fed51be8353286139b9fc75aa99f1e67"),
    ("staged", "externalRef", "SUP-2",
     "f83deda0e6275c441559bd112cbccd59ae27afcf961ab3b2e65deb79cb7375a3"),
    ("commit", "tool", "send_sms",
     "dc251fc21b3d774c73a6e94ca7fedfcb58087c317193f445f3178f81f3629eec"),
    # the arguments {"to": "c@x", "body": "B"}: another digest, another plan
    ("commit", "argsDigest", "cf9286d49f71351978f12ad64e279a083540c53e84e490b914d463513ed35f08",
     "c1f57388dd0e36415629ecc9d1209d914157d2bfb35e71c2f16b292a9a6ec498"),
    ("commit", "class", "compensatable",
     "9317bb7caf4fc78d33c97fdf6b55cf82dd011c58a3ec1fd574f276f3d85b65a4"),
    ("commit", "audience", ["public"],
     "98e938aec77f21ca6c0cf9211cca8c52d61afb710eb6b04f8ebebbd2496df30f"),
    # the arguments as the approver reads them
    ("commit", "args", {"to": "c@x", "body": "B"},
     "873c5c3e3e7a82559c84d671a4f1b12615b6ba767569d03243daf064c5df5977"),
]


def test_args_digest_is_the_golden_value() -> None:
    assert args_digest(ARGS, "") == ARGS_DIGEST
    assert args_digest({"to": "c@x", "body": "B"}, "") == PLAN_VARIATIONS[7][2]
    assert args_digest({"body": "b", "to": "c@x"}, "") == ARGS_DIGEST  # key order is not content


def test_keyed_args_digest_is_the_golden_value() -> None:
    assert args_digest(ARGS, DIGEST_KEY) == KEYED_DIGEST
    assert args_digest({"body": "b", "to": "c@x"}, DIGEST_KEY) == KEYED_DIGEST
    other_key = DIGEST_KEY.replace("AAEC", "AQEC")
    assert args_digest(ARGS, other_key) not in (KEYED_DIGEST, ARGS_DIGEST)


def test_plan_hash_is_the_golden_value() -> None:
    assert plan_hash(STAGED, COMMIT) == PLAN_HASH


@pytest.mark.parametrize(("part", "field", "value", "expected"), PLAN_VARIATIONS,
                         ids=[f"{p}.{f}" for p, f, _, _ in PLAN_VARIATIONS])
def test_each_plan_field_changes_the_hash(part: str, field: str, value: object,
                                          expected: str) -> None:
    staged, commit = copy.deepcopy(STAGED), copy.deepcopy(COMMIT)
    (staged if part == "staged" else commit)[0][field] = value
    assert plan_hash(staged, commit) == expected


def test_a_commit_step_is_hashed_with_its_shown_arguments_and_their_digest() -> None:
    """What the approver reads and what will run, both: changing the shown arguments alone, or
    the digest alone, is another plan (tests/integration/test_approval_integrity.py)."""
    masked = copy.deepcopy(COMMIT)
    masked[0]["args"] = {"to": "c@x", "body": "[masked]"}
    assert plan_hash(STAGED, masked) != PLAN_HASH


def test_where_a_step_sits_in_the_plan_changes_the_hash() -> None:
    """The same steps as done so far, or as still to come, are another plan."""
    # sha256('{"commit":[],"staged":[]}')
    assert plan_hash([], []) == "3b9c3b0a2a1b418eb9d4a7f1132f49682d8acdb109024162e706fc453e6ec465"
    assert plan_hash([], STAGED + COMMIT) == (
        "ad635f507ccdf1e7a28d0c1fce3899314a22b72dab0c89924d0cd085c647473d")
    assert plan_hash(STAGED + COMMIT, []) == (
        "255747e269f34670e92b3a27dc7a76635764b32b6276dc04c1017048f9f4df89")


def test_the_order_of_keys_in_a_step_does_not_change_the_hash() -> None:
    """The hash is over canonical JSON: the same plan read back from the database (its keys in
    another order) is the same plan."""
    reordered = [dict(reversed(list(step.items()))) for step in COMMIT]
    reordered[0]["args"] = {"body": "b", "to": "c@x"}
    assert plan_hash(STAGED, reordered) == PLAN_HASH
