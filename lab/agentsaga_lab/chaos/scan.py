"""The hostile-output scan: after a campaign, every output it produced is searched for the
card numbers and secrets it planted (in the charges' arguments, in the Stripe key the
connectors send, and in what a hostile real system answers: `world:hostile_reject`). A value
found in clear anywhere is a violation (`masked`): the sidecars' and Jobs' output, what the
agent was told, and every table of the saga log's database.

A card number is found by its digits but the last four, whatever separates them; a secret by
its text or its last ten characters (a key masked only in part)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agentsaga_lab.chaos.invariants import Violation

CARDS = ("4242 4242 4242 4242", "4000-0566-5566-5556", "5555555555554444")
"""Planted in every charge's arguments (the first) and in a hostile system's answers."""
HOSTILE_KEY = "sk_live_51HostileEchoAbCdEf"
"""An API key a hostile system's error quotes back, as if it were the caller's."""

_SEPARATORS = str.maketrans("", "", " \u00a0./-")


def hostile_body(stripe_key: str) -> dict[str, object]:
    """What a hostile real system answers: an error quoting the request's card numbers and the
    caller's credentials (its own `Authorization` header and another key)."""
    return {"error": {"type": "card_error", "code": "card_declined", "message": (
        f"card {CARDS[0]} declined (also tried {CARDS[1]}, {CARDS[2]}); request "
        f"Authorization: Bearer {stripe_key}, fallback key {HOSTILE_KEY}")}}


def found(text: str, secrets: Iterable[str]) -> list[str]:
    """The planted values `text` holds in clear (cards as `****` plus their last four)."""
    flat = text.translate(_SEPARATORS)
    cards = [f"card ****{card[-4:]}" for card in CARDS
             if card.translate(_SEPARATORS)[:-4] in flat]
    return cards + [f"secret {secret[:8]}…" for secret in secrets
                    if secret and (secret in text or secret[-10:] in text)]


def scan(outputs: Mapping[str, str], secrets: Iterable[str]) -> list[Violation]:
    """One `masked` violation per output that holds a planted value in clear."""
    secrets = [*secrets, HOSTILE_KEY]
    return [Violation("masked", "(campaign)", f"{where} holds {', '.join(leaked)} in clear")
            for where, text in outputs.items() if (leaked := found(text, secrets))]
