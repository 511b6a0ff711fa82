"""Tools that say secrets: every card number form and secret of `planted_secrets` in their
exceptions (a surprise, a rejection, a pure tool's failure, a compensation that cannot be built,
a bug in a compensate function, a compensation that fails during unwind) and in their results.
Stateless: nothing of theirs is ground truth, only what the sidecar made of what they said.

    note       reversible; its result echoes its arguments and adds the planted text;
               its compensation `unnote` raises during unwind
    decline    reversible; raises Rejected quoting the planted text (-> FAILED)
    charge     compensatable, no lookup; raises RuntimeError quoting it (-> UNKNOWN, then a
               person settles it: NEEDS_HUMAN)
    peek       pure; raises ValueError quoting it
    wire       compensatable; its compensate raises ValueError quoting it (refused, R6)
    buggy      compensatable; its compensate raises RuntimeError quoting it (a bug: INTERNAL)
"""

from __future__ import annotations

from typing import Any

from agentsaga import NO_LOOKUP, Compensation, Registry, Rejected
from sagatest.planted_secrets import planted_text


def said() -> str:
    """What the real system said: every planted card number and secret."""
    return f"the gateway answered 402: {planted_text()}"


def _nothing_found(key: str) -> None:
    return None


def _unsayable(args: dict[str, Any], key: str) -> Compensation:
    raise ValueError(said())


def _buggy(args: dict[str, Any], key: str) -> Compensation:
    raise RuntimeError(said())


def build_registry() -> Registry:
    registry = Registry()

    @registry.tool(cls="reversible", lookup=_nothing_found,
                   compensate=lambda args, key: Compensation("unnote", {"by_key": key}))
    def note(body: str, idempotency_key: str) -> dict[str, Any]:
        return {"id": "note-1", "body": body, "echo": said()}

    @registry.tool(cls="irreversible", lookup=NO_LOOKUP)
    def unnote(by_key: str, idempotency_key: str) -> dict[str, Any]:
        raise RuntimeError(said())

    @registry.tool(cls="reversible", lookup=_nothing_found,
                   compensate=lambda args, key: Compensation("unnote", {"by_key": key}))
    def decline(body: str, idempotency_key: str) -> dict[str, Any]:
        raise Rejected(said())

    @registry.tool(cls="compensatable", lookup=NO_LOOKUP,
                   compensate=lambda args, key: Compensation("unnote", {"by_key": key}))
    def charge(body: str, idempotency_key: str) -> dict[str, Any]:
        raise RuntimeError(said())

    @registry.tool(cls="pure")
    def peek(body: str) -> dict[str, Any]:
        raise ValueError(said())

    @registry.tool(cls="compensatable", lookup=_nothing_found, compensate=_unsayable)
    def wire(body: str, idempotency_key: str) -> dict[str, Any]:
        return {"id": "wire-1"}

    @registry.tool(cls="compensatable", lookup=_nothing_found, compensate=_buggy)
    def buggy(body: str, idempotency_key: str) -> dict[str, Any]:
        return {"id": "buggy-1"}

    return registry


registry = build_registry()
