"""Card numbers never reach the saga log: what is masked, and what is left alone."""

from __future__ import annotations

import io
import logging
import random
from collections.abc import Iterator
from typing import cast

import pytest

from agentsaga import redact
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


@pytest.mark.parametrize(("text", "masked"), [
    ("connect postgresql://agent:s3cr3t-pw@db:5432/saga failed",
     "connect postgresql://agent:[redacted]@db:5432/saga failed"),
    ("dsn=postgres://u:p%40ss@h/db?sslmode=require", "dsn=postgres://u:[redacted]@h/db?sslmode=require"),
    ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_abc-1 expired", "token [redacted] expired"),
    ("key AKIAIOSFODNN7EXAMPLE used", "key [redacted] used"),
    ("temporary ASIAIOSFODNN7EXAMPLE", "temporary [redacted]"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "aws_secret_access_key=[redacted]"),
    ('{"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}',
     '{"AWS_SECRET_ACCESS_KEY": "[redacted]"}'),
    ("push with ghp_0123456789abcdefghijABCDEFGHIJ012345", "push with [redacted]"),
    ("gho_0123456789abcdefghijABCDEFGHIJ012345 and ghs_0123456789abcdefghijABCDEFGHIJ012345",
     "[redacted] and [redacted]"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "[redacted]"),
    ('{"X-Api-Key": "k-123", "Cookie": "session=abc; id=2"}',
     '{"X-Api-Key": "[redacted]", "Cookie": "[redacted]"}'),
    ("Set-Cookie: sid=xyz; HttpOnly", "Set-Cookie: [redacted]"),
    ("x-api-key:abc", "x-api-key:[redacted]"),
    ("AUTHORIZATION: Digest username=alice, response=6629fae4", "AUTHORIZATION: [redacted]"),
    ("authorization: Bearer short", "authorization: [redacted]"),
    ("{'cookie': 'a=1'}", "{'cookie': '[redacted]'}"),
])
def test_dsn_passwords_tokens_keys_and_credential_headers_are_masked(text: str,
                                                                    masked: str) -> None:
    assert redact_text(text) == masked
    assert redact_text(masked) == masked  # masking what is masked changes nothing


@pytest.mark.parametrize("text", [
    "http://host:8080/path@x", "see https://example.com/a:b@c/d", "cookies are nice",
    "Authorization: Bearer [redacted]", "an authorization was given",
])
def test_urls_without_a_password_and_masked_headers_are_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_header_values_are_masked_under_their_keys_in_any_case() -> None:
    masked = redact_value({"X-API-KEY": "k", "Cookie": "a=1", "set-cookie": "b=2",
                           "Proxy-Authorization": "Basic x", "aws_secret_access_key": "s"})
    assert set(masked.values()) == {"[redacted]"}


def test_a_card_in_a_plan_shows_a_keyed_digest_of_the_whole_number() -> None:
    """Two cards ending alike look different; the digest is an HMAC under the run's key (a
    key of 32 random bytes), not a plain hash of the number."""
    import base64
    import hashlib
    import hmac

    from agentsaga.redact import card_digest

    key = base64.urlsafe_b64encode(bytes(range(32))).decode()
    first = mask_cards_value({"to": "4242 4242 4242 4242"}, key)["to"]
    second = mask_cards_value({"to": "4000 0000 0002 4242"}, key)["to"]
    assert first == f"[card ****4242 #{card_digest('4242424242424242', key)}]" != second
    assert second.startswith("[card ****4242 #") and len(second) == len("[card ****4242 #]") + 8
    expected = hmac.new(bytes(range(32)), b"4242424242424242", hashlib.sha256).hexdigest()[:8]
    assert card_digest("4242424242424242", key) == expected
    assert hashlib.sha256(b"4242424242424242").hexdigest()[:8] != expected
    other_key = base64.urlsafe_b64encode(bytes(32)).decode()
    assert mask_cards_value({"to": "4242 4242 4242 4242"}, other_key)["to"] != first
    assert mask_cards_value(first, key) == first  # masked once
    assert redact_plan({"digestKey": key, "commit": [{"args": {"n": 4242424242424242}}]})[
        "commit"][0]["args"]["n"] == first


def _every_pattern(text: str) -> str:
    """`redact_text` as it was before its one-search shortcut: every pattern, always."""
    text = redact.mask_cards(text)
    for pattern, replacement in redact._SECRETS:
        text = pattern.sub(replacement, text)
    return text


FRAGMENTS = ("sk_live_", "rk_test_", "whsec_", "-----BEGIN RSA PRIVATE KEY-----",
             "-----END RSA PRIVATE KEY-----", "-----BEGIN PRIVATE KEY-----", "Bearer ", "basic ",
             "TOKEN\t", "postgresql://", "u:", "@", "host/db", "eyJ", ".", "AKIA", "ASIA", "AROA",
             "aws_", "secret_access_key", "secret_key", "session_token", "ghp_", "gho_",
             "github_pat_", "Authorization", "proxy-authorization", "set-cookie", "Cookie",
             "x-api-key", "password", "passwd", "passphrase", "pwd", "secret", "client-secret",
             "api_key", "apikey", "access_token", "refresh-token", "auth_token", "=", ": ", ":",
             '"', "'", '\\"', "\\", " ", "\n", ",", "}", "]", "&", "abcdefghij", "ABCDEFGHIJKLMNOP",
             "0123456789", "4242424242424242", "4242 4242 4242 4242", "\u212a", "\u017f", "\u0130",
             "xyz", "[redacted]")


def test_the_one_search_shortcut_masks_exactly_what_every_pattern_would() -> None:
    rng = random.Random(11)
    for _ in range(30000):
        parts = [rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12))]
        text = "".join(p.swapcase() if rng.random() < 0.3 else p for p in parts)
        assert redact.redact_text(text) == _every_pattern(text), text


def test_each_secret_pattern_needs_one_of_the_shortcut_s_words() -> None:
    # each fragment, in the cases the patterns accept, with what may follow it: wherever a
    # pattern matches, the shortcut finds a word
    for fragment in FRAGMENTS:
        for text in (fragment, fragment.upper(), fragment.lower()):
            if any(pattern.search(text + "abcdefghijklmnopqrstuvwxyz0123456789xyzxyz@h")
                   for pattern, _ in redact._SECRETS):
                assert redact._SECRET_WORDS.search(text), text
