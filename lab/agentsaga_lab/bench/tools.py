"""The tools the benchmark dispatches: bodies that do nothing, so that only the harness is timed.

AGENTSAGA_BENCH_TOOL_DELAY_MS makes `noop` wait that long: a deliberately slowed dispatch, to
see the regression gate (`agentsaga bench --compare`) fail."""

from __future__ import annotations

import os
import time
from typing import Any

from agentsaga.saga.registry import Compensation, Registry

registry = Registry()

_DELAY_S = float(os.environ.get("AGENTSAGA_BENCH_TOOL_DELAY_MS") or 0) / 1000.0


def _undo(args: dict[str, Any], key: str) -> Compensation:
    return Compensation("noop", {"n": -1})


def _nothing(key: str) -> None:
    return None


def noop(idempotency_key: str, n: int = 0) -> dict[str, Any]:
    """A side-effecting tool whose body does nothing (but wait AGENTSAGA_BENCH_TOOL_DELAY_MS)."""
    if _DELAY_S:
        time.sleep(_DELAY_S)
    return {"id": idempotency_key}


def pure_noop(n: int = 0) -> dict[str, Any]:
    """A pure tool whose body does nothing."""
    return {"n": n}


def slow_noop(idempotency_key: str, ms: int = 20) -> dict[str, Any]:
    """A side-effecting tool that waits `ms` milliseconds, as a call to a real system does."""
    time.sleep(ms / 1000)
    return {"id": idempotency_key}


registry.register(noop, cls="compensatable", compensate=_undo, lookup=_nothing)
registry.register(slow_noop, cls="compensatable", compensate=_undo, lookup=_nothing)
registry.register(pure_noop, cls="pure")
