"""Card numbers and secrets never reach the saga log, the AgentRun's status, the logs, traces or
error messages (PCI: store no PAN; no credential at rest in clear).

`redact_text` masks, in any text:

- **card numbers**: 13–19 digits (ASCII or full-width) that pass the Luhn check and start like a
  card of a major network (2–6), written together or in groups of two or more digits separated
  by a space, no-break space, thin space, dash, dot or slash: `[card ****1234]`. Other long
  numbers (ids, UUIDs, amounts, dates) fail the Luhn check or the shape and are left alone;
- **secret-looking values**: Stripe-style secret keys (`sk_live_…`, `rk_test_…`, `whsec_…`),
  `Bearer`/`Basic` credentials, `password=…` / `"api_key": "…"`-style assignments, PEM
  private keys, the password of a URL or DSN (`postgresql://user:[redacted]@host`), JSON Web
  Tokens (`eyJ….….…`), AWS access key ids (`AKIA…`, `ASIA…`) and secret keys
  (`aws_secret_access_key=…`), GitHub tokens (`ghp_…`, `gho_…`, `ghs_…`, `ghu_…`, `ghr_…`,
  `github_pat_…`) and the values of the `Authorization`, `Proxy-Authorization`, `Cookie`,
  `Set-Cookie` and `X-Api-Key` headers (any case) become `[redacted]`.

`redact_value` applies it to every string of a JSON value (and masks a card number given as a
JSON number); the saga log stores every JSON value and error text through it, every log record
passes it (`agentsaga.telemetry.logformat`), every `SagaError` message is masked when it is made
(`agentsaga.errors`) and every span's status and payload (`agentsaga.telemetry.payloads`).

One exception, on purpose: the commit steps' arguments of a staged plan (R10) are what a person
approves, so they are shown whole with only card numbers masked (`mask_cards_value`,
`redact_plan`): a general rule would hide `Token evil.example/claim` as `Token [redacted]`.
There a card number is masked with a digest of the whole number beside its last four,
`[card ****4242 #1f0c9a7e]`, keyed with the run's secret digest key (`PivotRecord.digest_key`,
never shown): two accounts ending in the same four digits look different to the approver, and
the digest cannot be brute-forced back to the number by whoever reads it. Elsewhere (logs,
spans, errors, the steps' rows) no such key is at hand and a card stays `[card ****4242]`.

`clip` masks before it shortens a text: a card number cut in half no longer passes the Luhn
check. What the tool itself receives is unchanged: masking happens on the way to storage, after
the call's arguments, its compensation and its key were taken from the real values.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable
from functools import partial
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
    # the password of a URL or DSN: postgresql://user:secret@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@\"'\\]+:)(?!\[redacted\]@)"
                r"([^\s@/\"'\\]+)@"), rf"\1{MASK}@"),
    # JSON Web Tokens: header.payload.signature, the first two base64url JSON objects
    (re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"), MASK),
    # AWS access key ids, and secret keys (40 characters, named in an assignment)
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"), MASK),
    (re.compile(r"(?i)\b((?:aws_)?(?:secret_access_key|secret_key|session_token))"
                r"((?:\\?[\"'])?\s*[=:]\s*(?:\\?[\"'])?)(?!\[redacted\])([A-Za-z0-9/+=]{16,})"),
     rf"\1\2{MASK}"),
    # GitHub tokens: personal, OAuth, app server, user-to-server, refresh, fine-grained
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"), MASK),
    # the values of credential headers (not one already masked as `Bearer [redacted]`)
    (re.compile(r"(?i)\b(proxy-authorization|authorization|set-cookie|cookie|x-api-key)"
                r"((?:\\?[\"'])?\s*:\s*(?:\\?[\"'])?)"
                r"(?!\s*(?:(?:Bearer|Basic|Token)\s+)?\[redacted\])([^\s\"'\\][^\r\n\"'\\]*)"),
     rf"\1\2{MASK}"),
    # password=..., "api_key": "...", client_secret: ...
    (re.compile(r"(?i)\b(pass(?:word|wd|phrase)?|pwd|secret|client[_-]?secret|secret[_-]?key|"
                r"api[_-]?key|access[_-]?token|refresh[_-]?token|auth[_-]?token)"
                r"((?:\\?[\"'])?\s*[=:]\s*(?:\\?[\"'])?)(?!\[redacted\])([^\s\"'\\&,;}\]]+)"),
     rf"\1\2{MASK}"),
)


# What every pattern of _SECRETS needs somewhere in the text (a word it names, `://`, a
# prefix), in any case: a text without one of these is left as it is, in one search instead of
# a substitution per pattern (the log stores every value through `redact_text`). Each pattern
# contains one of them: a test checks the two against each other on texts made to match.
_SECRET_WORDS = re.compile(
    r"sk_|rk_|whsec_|-----BEGIN|bearer|basic|token|://|eyJ|AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|"
    r"AIPA|secret|gh[pousr]_|github_pat_|authorization|cookie|x-api-key|pass|pwd|api[_-]?key",
    re.IGNORECASE)


_SECRET_KEY = re.compile(
    r"(?i)^(pass(word|wd|phrase)?|pwd|secret|client[_-]?secret|secret[_-]?key|api[_-]?key|"
    r"access[_-]?token|refresh[_-]?token|auth[_-]?token|authorization|private[_-]?key|"
    r"proxy[_-]authorization|cookie|set[_-]cookie|x[_-]api[_-]key|"
    r"(aws[_-])?secret[_-]access[_-]key|(aws[_-])?session[_-]token)$")
"""Keys whose values are secrets whatever they look like."""


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


CARD_DIGEST_CHARS = 8
"""Hex characters of a card's keyed digest in a staged plan (32 bits: two cards with the same
last four digits differ there but once in four billion pairs)."""


def card_digest(digits: str, key: str) -> str:
    """The short digest shown beside a card's last four digits in a staged plan: HMAC-SHA-256 of
    its digits under `key` (the run's digest key, base64url), so it cannot be brute-forced from
    the few million numbers that share a card's first six and last four digits."""
    mac = hmac.new(base64.urlsafe_b64decode(key), digits.encode(), hashlib.sha256)
    return mac.hexdigest()[:CARD_DIGEST_CHARS]


def _replace(match: re.Match[str], key: str = "") -> str:
    digits = "".join(ch for ch in match.group(0).translate(_FULL_WIDTH) if ch.isascii()
                     and ch.isdigit())
    if not 13 <= len(digits) <= 19 or digits[0] not in "23456" or not luhn_ok(digits):
        return match.group(0)
    if key:
        return f"[card ****{digits[-4:]} #{card_digest(digits, key)}]"
    return f"[card ****{digits[-4:]}]"


_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def mask_cards(text: str, key: str = "") -> str:
    """`text` with every card number masked to its last four digits (and, with the run's digest
    `key`, a keyed digest of the whole number: `card_digest`) and NUL characters (which
    Postgres text and JSON cannot hold), raw or JSON-escaped, replaced by U+FFFD; nothing else
    changed."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if "\\u0000" in text:
        text = _ESCAPED_NUL.sub(lambda m: m.group(1) + "\\ufffd", text)
    return _CANDIDATE.sub(partial(_replace, key=key) if key else _replace, text)


def redact_text(text: str) -> str:
    """`text` with every card number masked to its last four digits (`mask_cards`) and
    secret-looking values replaced by `[redacted]`."""
    text = mask_cards(text)
    if _SECRET_WORDS.search(text) is None:
        return text
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


def mask_cards_value(value: Any, key: str = "") -> Any:
    """A JSON value with only its card numbers masked (in strings, keys and JSON numbers):
    what an approver reads of a commit step's arguments (with the run's digest `key`, each
    card with its keyed digest: `mask_cards`)."""
    if isinstance(value, str):
        return mask_cards(value, key)
    if isinstance(value, dict):
        return {mask_cards(str(k), key): mask_cards_value(v, key) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_cards_value(v, key) for v in value]
    return _masked_number(value, partial(mask_cards, key=key))


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
    arguments, which keep all but their card numbers (`mask_cards_value`, keyed with the plan's
    `digestKey` when it holds one): the approver sees what they approve. The `digestKey` itself
    is kept as it is (random, made by `agentsaga.saga.pivot`, and stored only in the saga log)."""
    if not isinstance(plan, dict) or not isinstance(plan.get("commit"), list):
        return redact_value(plan)
    key = plan.get("digestKey")
    key = key if isinstance(key, str) else ""
    out: dict[str, Any] = redact_value(
        {k: v for k, v in plan.items() if k not in ("commit", "digestKey")})
    out["commit"] = [_commit_step(step, key) for step in plan["commit"]]
    if key:
        out["digestKey"] = key
    return out


def _commit_step(step: Any, key: str) -> Any:
    if not isinstance(step, dict) or "args" not in step:
        return redact_value(step)
    out: dict[str, Any] = redact_value({k: v for k, v in step.items() if k != "args"})
    out["args"] = mask_cards_value(step["args"], key)
    return out
