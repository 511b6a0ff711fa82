"""What of a tool call's arguments and result may reach a trace: nothing by default; with
AGENTSAGA_TRACE_PAYLOADS=true, the redacted JSON.

`redact` always runs: card numbers are masked to their last four digits (`agentsaga.redact`),
values under secret-looking keys (password, token, api_key, authorization, card number, cvc...)
and secret-looking values (Stripe keys, Bearer tokens, `password=`, private keys) become
`[redacted]`. A deployment adds its own rules with
AGENTSAGA_TRACE_REDACT=module:function (a function from JSON to JSON), applied after these.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from typing import Any

from agentsaga.errors import ConfigurationError
from agentsaga.redact import MASK, redact_text

Redactor = Callable[[Any], Any]

MAX_CHARS = 4096
"""Longest payload attribute; longer JSON is cut (traces are not a data store)."""

_SECRET_KEY = re.compile(
    r"pass(word|phrase)?|secret|token|api[_-]?key|authori[sz]ation|cookie|credential|"
    r"private[_-]?key|card[_-]?number|^pan$|^number$|cvc|cvv|^exp_(month|year)$|iban|ssn",
    re.IGNORECASE)


def redact(value: Any) -> Any:
    """`value` (JSON) with card numbers masked and secrets removed."""
    if isinstance(value, dict):
        return {k: MASK if _SECRET_KEY.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, int) and not isinstance(value, bool) \
            and redact_text(str(value)) != str(value):
        return MASK  # a card number passed as a JSON number
    return value


def text(value: str) -> str:
    """Free text (error messages) for a span: card numbers and secret keys masked."""
    return redact_text(value)


def hook_from(spec: str) -> Redactor | None:
    """AGENTSAGA_TRACE_REDACT=module:function, loaded once at start-up."""
    if not spec:
        return None
    module_name, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"AGENTSAGA_TRACE_REDACT={spec!r}: cannot load it ({exc}); use module:function"
        ) from None
    if not callable(fn):
        raise ConfigurationError(f"AGENTSAGA_TRACE_REDACT={spec!r} is not a function")
    return fn  # type: ignore[no-any-return]


def render(value: Any, hook: Redactor | None) -> str:
    """The attribute text of a payload: redacted, then the hook, then redacted again (a hook
    cannot bring a card number back), as JSON of at most MAX_CHARS characters."""
    cleaned = redact(value)
    if hook is not None:
        cleaned = redact(hook(cleaned))
    rendered = json.dumps(cleaned, default=str, separators=(",", ":"), sort_keys=True)
    return text(rendered)[:MAX_CHARS]
