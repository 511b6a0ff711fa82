"""Card numbers and secrets never reach the saga log, the AgentRun's status, the logs, traces or
error messages (PCI: store no PAN; no credential at rest in clear).

`redact_text` masks, in any text:

- **card numbers**: 13–19 digits (ASCII or full-width) that pass the Luhn check and start like a
  card of a major network (2–6), written together or in groups of two or more digits separated
  by a space, no-break space, thin space, dash, dot or slash: `[card ****1234]`. Other long
  numbers (ids, UUIDs, amounts, dates) fail the Luhn check or the shape and are left alone;
- **secret-looking values**: Stripe-style secret keys (`sk_live_…`, `rk_test_…`, `whsec_…`),
  `Bearer`/`Basic` credentials, `password=…` / `"api_key": "…"`-style assignments and PEM
  private keys become `[redacted]`.

`redact_value` applies it to every string of a JSON value (and masks a card number given as a
JSON number); the saga log stores every JSON value and error text through it, every log record
passes it (`agentsaga.telemetry.logformat`), every `SagaError` message is masked when it is made
(`agentsaga.errors`) and every span's status and payload (`agentsaga.telemetry.payloads`).

One exception, on purpose: the commit steps' arguments of a staged plan (R10) are what a person
approves, so they are shown whole with only card numbers masked (`mask_cards_value`,
`redact_plan`): a general rule would hide `Token evil.example/claim` as `Token [redacted]`.

`clip` masks before it shortens a text: a card number cut in half no longer passes the Luhn
check. What the tool itself receives is unchanged: masking happens on the way to storage, after
the call's arguments, its compensation and its key were taken from the real values.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MASK = "[redacted]"

_DIGIT = "0-9\uff10-\uff19"  # ASCII and full-width digits
_SEP = " \u00a0\u2007\u2009\u202f\u3000./-"
_WORD = "A-Za-z_"
# A maximal run of digit groups (two or more digits each) joined by single separators: not a
# part of a longer number, nor a decimal ("12.4242…", "…4242.5"), nor of a word: digits that
# touch a letter belong to an identifier (a hex digest, an id), which a card number never is.
_CANDIDATE = re.compile(
    rf"(?<![{_DIGIT}{_WORD}])(?<![{_DIGIT}][{_SEP}])"
    rf"[{_DIGIT}]{{2,}}(?:[{_SEP}][{_DIGIT}]{{2,}})*"
    rf"(?![{_DIGIT}{_WORD}])(?![{_SEP}][{_DIGIT}])")
_FULL_WIDTH = str.maketrans({chr(0xFF10 + d): str(d) for d in range(10)})

_SECRETS = (
    # Stripe and webhook secrets
    (re.compile(r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z_]+|\bwhsec_[0-9A-Za-z_]+"), MASK),
    # PEM private keys, whole or cut off (in JSON text their newlines are escaped)
    (re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE "
                r"KEY-----|[A-Za-z0-9+/=\s\\]*)", re.DOTALL), MASK),
    # HTTP credentials
    (re.compile(r"\b(Bearer|Basic|Token)(\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE),
     rf"\1\2{MASK}"),
    # password=..., "api_key": "...", client_secret: ...
    (re.compile(r"(?i)\b(pass(?:word|wd|phrase)?|pwd|secret|client[_-]?secret|secret[_-]?key|"
                r"api[_-]?key|access[_-]?token|refresh[_-]?token|auth[_-]?token)"
                r"((?:\\?[\"'])?\s*[=:]\s*(?:\\?[\"'])?)(?!\[redacted\])([^\s\"'\\&,;}\]]+)"),
     rf"\1\2{MASK}"),
)


_SECRET_KEY = re.compile(
    r"(?i)^(pass(word|wd|phrase)?|pwd|secret|client[_-]?secret|secret[_-]?key|api[_-]?key|"
    r"access[_-]?token|refresh[_-]?token|auth[_-]?token|authorization|private[_-]?key)$")
"""Keys whose values are secrets whatever they look like."""


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _replace(match: re.Match[str]) -> str:
    digits = "".join(ch for ch in match.group(0).translate(_FULL_WIDTH) if ch.isascii()
                     and ch.isdigit())
    if not 13 <= len(digits) <= 19 or digits[0] not in "23456" or not luhn_ok(digits):
        return match.group(0)
    return f"[card ****{digits[-4:]}]"


_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def mask_cards(text: str) -> str:
    """`text` with every card number masked to its last four digits and NUL characters
    (which Postgres text and JSON cannot hold), raw or JSON-escaped, replaced by U+FFFD;
    nothing else changed."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if "\\u0000" in text:
        text = _ESCAPED_NUL.sub(lambda m: m.group(1) + "\\ufffd", text)
    return _CANDIDATE.sub(_replace, text)


def redact_text(text: str) -> str:
    """`text` with every card number masked to its last four digits (`mask_cards`) and
    secret-looking values replaced by `[redacted]`."""
    text = mask_cards(text)
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def clip(text: str, limit: int, marker: str = "...") -> str:
    """`text` masked, then cut to at most `limit` characters (ending in `marker` when cut):
    masking first, so a cut never leaves the head of a card number (which then fails the Luhn
    check) or of a secret in clear."""
    masked = redact_text(text)
    if len(masked) <= limit:
        return masked
    return masked[:max(limit - len(marker), 0)] + marker


def redact_optional(text: str | None) -> str | None:
    return None if text is None else redact_text(text)


def redact_value(value: Any) -> Any:
    """A JSON value with `redact_text` applied to every string (keys included) and a card
    number given as a JSON number (an integer, or a float with no fraction) masked; the value
    of a secret-named key (`password`, `api_key`, `authorization`, ...) becomes `[redacted]`."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact_text(str(k)): MASK if _SECRET_KEY.match(str(k)) and v not in (None, "")
                else redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v) for v in value]
    return _masked_number(value, redact_text)


def mask_cards_value(value: Any) -> Any:
    """A JSON value with only its card numbers masked (in strings, keys and JSON numbers):
    what an approver reads of a commit step's arguments."""
    if isinstance(value, str):
        return mask_cards(value)
    if isinstance(value, dict):
        return {mask_cards(str(k)): mask_cards_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_cards_value(v) for v in value]
    return _masked_number(value, mask_cards)


def _masked_number(value: Any, mask: Callable[[str], str]) -> Any:
    """A card number given as a JSON number (an integer, or a float with no fraction such as
    4242424242424242.0) as its masked text; any other value as it is."""
    if isinstance(value, float) and value.is_integer() and abs(value) > 10**12:
        masked = mask(str(int(value)))
        return masked if masked != str(int(value)) else value
    if isinstance(value, int) and not isinstance(value, bool) and value > 10**12:
        masked = mask(str(value))
        return masked if masked != str(value) else value
    return value


def redact_plan(plan: Any) -> Any:
    """A staged plan (`PivotRecord.to_json()` or the `status.pivot` shown of it, whole or a
    merge patch of it): every field redacted (`redact_value`) but the commit steps'
    arguments, which keep all but their card numbers (`mask_cards_value`): the approver sees
    what they approve."""
    if not isinstance(plan, dict) or not isinstance(plan.get("commit"), list):
        return redact_value(plan)
    out: dict[str, Any] = redact_value({k: v for k, v in plan.items() if k != "commit"})
    out["commit"] = [_commit_step(step) for step in plan["commit"]]
    return out


def _commit_step(step: Any) -> Any:
    if not isinstance(step, dict) or "args" not in step:
        return redact_value(step)
    out: dict[str, Any] = redact_value({k: v for k, v in step.items() if k != "args"})
    out["args"] = mask_cards_value(step["args"])
    return out
