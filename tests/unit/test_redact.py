"""Card numbers never reach the saga log: what is masked, and what is left alone."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import cast

import pytest

from agentsaga.errors import InvalidArguments
from agentsaga.redact import clip, mask_cards_value, redact_plan, redact_text, redact_value
from agentsaga.saga.registry import Registry
from agentsaga.saga.tool_schema import check_arguments
from agentsaga.telemetry import logformat


@pytest.mark.parametrize(("text", "masked"), [
    ("Refunded to card 4242 4242 4242 4242.", "Refunded to card [card ****4242]."),
    ("pan=5555555555554444,", "pan=[card ****4444],"),
    ('{"card":"4000-0566-5566-5556"}', '{"card":"[card ****5556]"}'),
])
def test_card_numbers_are_masked_to_their_last_four_digits(text: str, masked: str) -> None:
    assert redact_text(text) == masked


@pytest.mark.parametrize("text", [
    "order 1182", "amount 4242424242424242.5", "ratio 1.4242424242424242",
    "4242424242424241 fails the Luhn check", "a 20-digit id 42424242424242424242",
])
def test_other_numbers_are_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_nul_characters_raw_or_json_escaped_become_replacement_characters() -> None:
    assert redact_text("a\x00b") == "a\ufffdb"
    assert redact_text('{"v":"a\\u0000b"}') == '{"v":"a\\ufffdb"}'
    assert redact_text('{"v":"a\\\\u0000b"}') == '{"v":"a\\\\u0000b"}'  # an escaped backslash


@pytest.mark.parametrize(("text", "last4"), [
    ("4242.4242.4242.4242", "4242"),
    ("4242/4242/4242/4242", "4242"),
    ("4242\u00a04242\u00a04242\u00a04242", "4242"),
    ("\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12"
     "\uff14\uff12", "4242"),
    ("3782 822463 10005", "0005"),          # American Express, 15 digits in 4-6-5
    ("4222222222222", "2222"),              # a 13-digit Visa
    ("6011 0009 9013 9424 009", "4009"),    # 19 digits
])
def test_card_numbers_in_every_common_form_are_masked(text: str, last4: str) -> None:
    masked = redact_text(f"card: {text}.")
    assert masked == f"card: [card ****{last4}]."


@pytest.mark.parametrize("text", [
    "123e4567-e89b-12d3-a456-426614174000",   # a UUID
    "run 2026.12.03 10:15", "id 9f86d081884c7d659a2feaa0c55ad015",
    "4242 4242 4242 4241",                     # fails Luhn
    "tracking 1Z999AA10123456784",
])
def test_ids_dates_and_uuids_are_left_alone(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(("text", "kept"), [
    ("key sk_live_51HxYzAbCdEf0123456789 used", "key [redacted] used"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc", "Authorization: Bearer [redacted]"),
    ("dsn password=hunter2&user=x", "dsn password=[redacted]&user=x"),
    ('{"api_key":"abcdef123"}', '{"api_key":"[redacted]"}'),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "[redacted]"),
])
def test_secret_looking_values_are_masked(text: str, kept: str) -> None:
    assert redact_text(text) == kept


def test_json_values_are_masked_string_by_string() -> None:
    value = {"card": "\uff14\uff12\uff14\uff12 \uff14\uff12\uff14\uff12 \uff14\uff12\uff14\uff12"
                     " \uff14\uff12\uff14\uff12",
             "password": "x", "pan": 4242424242424242, "order": 1182,
             "as_float": 4242424242424242.0, "amount": 1500.0, "big": 1.5e15,
             "nested": ["Bearer abcdefghijkl"]}
    assert redact_value(value) == {
        "card": "[card ****4242]", "password": "[redacted]", "pan": "[card ****4242]",
        "order": 1182, "as_float": "[card ****4242]", "amount": 1500.0, "big": 1.5e15,
        "nested": ["Bearer [redacted]"]}


def test_hex_digests_are_never_taken_for_card_numbers() -> None:
    """A SHA-256 in hex holds runs of 13-19 digits that pass the Luhn check about once in 450
    digests; masking one would break a plan hash or an argument digest. 20,000 digests hold
    dozens of such runs: none may change, alone or inside JSON."""
    import hashlib
    import re

    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(20_000)]
    luhn_runs = [d for d in digests if any(_luhn(run) for run in re.findall(r"\d{13,19}", d))]
    assert len(luhn_runs) > 10  # the case is really exercised
    for digest in luhn_runs:
        assert redact_text(digest) == digest
        assert redact_value({"planHash": digest}) == {"planHash": digest}


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def test_a_text_is_masked_before_it_is_cut() -> None:
    """Cut first, `... 4111 1111 1111 11` would fail the Luhn check and stay in clear."""
    text = "x" * 40 + " 4111 1111 1111 1111 and password=hunter2"
    clipped = clip(text, 57)
    assert "4111 1111" not in clipped and clipped.endswith("...") and len(clipped) <= 57
    assert clip("short", 57) == "short"


def test_an_argument_error_never_quotes_a_card_number_cut_in_half() -> None:
    registry = Registry()

    @registry.tool(cls="pure")
    def quote(amount: int) -> dict[str, int]:
        return {"amount": amount}

    with pytest.raises(InvalidArguments) as refused:
        check_arguments(registry.get("quote"), {"amount": "x" * 40 + " 4111111111111111"})
    assert "41111111" not in str(refused.value) and "must be an integer" in str(refused.value)


def test_a_plan_keeps_its_commit_arguments_whole_but_their_card_numbers() -> None:
    """R10: the approver reads the commit steps' arguments as they will be sent, cards masked
    to their last four; every other field of the plan is masked as everything else is."""
    said = "card 4242 4242 4242 4242, Token evil.example/claim, password=hunter2"
    plan = {"planHash": "h", "reason": f"ok {said}",
            "steps": [{"tool": "t", "externalRef": "Bearer abcdefgh12345678"}],
            "commit": [{"tool": "send_email", "audience": ["customer"],
                        "args": {"body": said, "api_key": "k-1", "n": 4242424242424242}}]}
    masked = redact_plan(plan)
    assert masked["commit"][0]["args"] == {
        "body": "card [card ****4242], Token evil.example/claim, password=hunter2",
        "api_key": "k-1", "n": "[card ****4242]"}
    assert masked["reason"] == "ok card [card ****4242], Token [redacted], password=[redacted]"
    assert masked["steps"][0]["externalRef"] == "Bearer [redacted]"
    assert mask_cards_value(plan["commit"]) == masked["commit"]
    assert redact_plan({"state": "Approved"}) == {"state": "Approved"}  # a merge patch


@pytest.fixture
def command_log() -> Iterator[io.StringIO]:
    """A command's logging (`logformat.setup`), its handler writing here; undone afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    factory, raising = logging.getLogRecordFactory(), logging.raiseExceptions
    logformat.setup(verbose=False)
    written = io.StringIO()
    cast(logging.StreamHandler[io.StringIO], root.handlers[0]).setStream(written)
    yield written
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.setLogRecordFactory(factory)
    logging.raiseExceptions = raising


def test_every_log_record_is_masked_when_it_is_made(command_log: io.StringIO) -> None:
    """Whoever logs and whichever handler writes: the message, its arguments and the
    exception's text, chained causes included."""
    log = logging.getLogger("a.tool")
    try:
        try:
            raise ValueError("card 4242424242424242")
        except ValueError as cause:
            raise RuntimeError("Authorization: Bearer sk_live_51HxYzAbCdEf") from cause
    except RuntimeError:
        log.warning("charge %s failed", "4242 4242 4242 4242", exc_info=True)
    written = command_log.getvalue()
    assert "charge [card ****4242] failed" in written and "Traceback" in written
    assert "4242424242424242" not in written and "4242 4242 4242 4242" not in written
    assert "sk_live_51HxYzAbCdEf" not in written and "Bearer [redacted]" in written


def test_a_saga_error_is_masked_when_it_is_made() -> None:
    assert str(InvalidArguments("card 4242-4242-4242-4242")) == "card [card ****4242]"
