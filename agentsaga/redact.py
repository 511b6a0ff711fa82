"""Card numbers never reach the saga log, the logs or error messages (PCI: store no PAN).

`redact_text` replaces every run of 13–19 digits (spaces or dashes allowed between them) that
passes the Luhn check and starts like a card of a major network (2–6) with `[card ****1234]`.
The saga log applies it to every JSON value and error text it stores; what the tool itself
receives is unchanged.
"""

from __future__ import annotations

import re

# Not part of a longer number or a decimal ("12.4242…", "…4242.5"); a sentence's full stop
# after a card number is fine.
_CANDIDATE = re.compile(r"(?<!\d)(?<!\d\.)[2-6]\d(?:[ -]?\d){11,17}(?!\d)(?!\.\d)")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _replace(match: re.Match[str]) -> str:
    digits = re.sub(r"[ -]", "", match.group(0))
    if not 13 <= len(digits) <= 19 or not luhn_ok(digits):
        return match.group(0)
    return f"[card ****{digits[-4:]}]"


_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def redact_text(text: str) -> str:
    """`text` with every card number masked to its last four digits, and NUL characters
    (which Postgres text and JSON cannot hold), raw or JSON-escaped, replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if "\\u0000" in text:
        text = _ESCAPED_NUL.sub(lambda m: m.group(1) + "\\ufffd", text)
    return _CANDIDATE.sub(_replace, text)


def redact_optional(text: str | None) -> str | None:
    return None if text is None else redact_text(text)
