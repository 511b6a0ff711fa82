"""A tool's time contract (R7): how long a call can be on the wire, how soon its effect is
visible to its lookup, and how long the real system itself deduplicates a re-sent key.

    call_timeout_s ..... the longest a call can still be on the wire: the connector's own client
                         timeout, enforced by it. The INTENDED row stores its deadline, computed
                         from Postgres's clock (now() + call_timeout_s).
    visible_within_s ... how long after an effect commits its lookup is certain to find it: 0 for
                         a read by id or key (consistent), the index lag for a search.
    dedupes_for_s ...... how long the real system deduplicates a re-sent idempotency key (Stripe:
                         24 h; Jira, which takes no key: 0).

Reconcile settles NOT_EXECUTED only when it is certain: the lookup is empty and either the
deadline plus `visible_within_s` has passed, or the step is about to be re-sent unchanged under
its own key while the system still deduplicates it (`created_at + dedupes_for_s`).

Each connector declares its systems' contracts (with the documented source); configuration
overrides them per tool: `AGENTSAGA_TIME_CONTRACTS='{"create_ticket": {"visible_within_s": 90}}'`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from agentsaga.errors import ConfigurationError


@dataclass(frozen=True)
class TimeContract:
    """A tool registered without one (`timing=`) is taken as answering within its call and
    visible at once to its lookup: declare the real bounds for anything else."""

    call_timeout_s: float = 0.0
    visible_within_s: float = 0.0
    dedupes_for_s: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigurationError(
                    f"time contract: {f.name} must be a number of seconds >= 0, got {value!r}")

    def with_overrides(self, changes: Mapping[str, Any]) -> TimeContract:
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigurationError(
                f"time contract: unknown field(s) {', '.join(unknown)}; use "
                f"{', '.join(sorted(known))}")
        bad = {k: v for k, v in changes.items()
               if not isinstance(v, (int, float)) or isinstance(v, bool)}
        if bad:
            raise ConfigurationError(
                f"time contract: {', '.join(sorted(bad))} must be a number of seconds, got "
                f"{', '.join(repr(v) for v in bad.values())}")
        return replace(self, **{k: float(v) for k, v in changes.items()})


DEFAULT = TimeContract()


def parse_overrides(text: str) -> dict[str, dict[str, float]]:
    """`AGENTSAGA_TIME_CONTRACTS`: a JSON object of tool name -> {field: seconds}."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"AGENTSAGA_TIME_CONTRACTS is not JSON ({exc}); write e.g. "
            '{"create_ticket": {"visible_within_s": 90}}') from exc
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigurationError(
            "AGENTSAGA_TIME_CONTRACTS must map tool names to objects of seconds, e.g. "
            '{"create_ticket": {"visible_within_s": 90}}')
    out: dict[str, dict[str, float]] = {}
    for tool, changes in data.items():
        DEFAULT.with_overrides(changes)  # names and values checked here, once
        out[str(tool)] = {str(k): float(v) for k, v in changes.items()}
    return out
