"""Card numbers never reach the saga log: what is masked, and what is left alone."""

from __future__ import annotations

import pytest

from agentsaga.redact import redact_text


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
