"""The `created` windows reconcile lists Stripe's PaymentIntents in (R7): each step's intent
time to its deadline, widened for the clocks; overlapping windows listed once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentsaga.connectors.stripe import Window, windows
from agentsaga.saga.registry import LookupContext

T0 = datetime(2026, 12, 3, 13, 0, tzinfo=UTC)
S0 = int(T0.timestamp())


def step(key: str, start_s: float, deadline_s: float | None) -> LookupContext:
    deadline = None if deadline_s is None else T0 + timedelta(seconds=deadline_s)
    return LookupContext(key, {}, T0 + timedelta(seconds=start_s), deadline)


def test_one_step_is_its_intent_time_to_its_deadline_widened_by_the_margin() -> None:
    assert windows([step("a", 0, 10.5)], margin_s=60) == [
        Window(S0 - 60, S0 + 71, frozenset({"a"}))]


def test_overlapping_windows_are_listed_once_and_disjoint_ones_apart() -> None:
    out = windows([step("late", 1000, 1010), step("a", 0, 10), step("b", 5, 30)], margin_s=1)
    assert out == [Window(S0 - 1, S0 + 31, frozenset({"a", "b"})),
                   Window(S0 + 999, S0 + 1011, frozenset({"late"}))]


def test_a_row_without_a_deadline_is_open_ended_and_takes_in_every_later_one() -> None:
    out = windows([step("old", 0, None), step("a", 0, 10), step("b", 500, 510)], margin_s=0)
    assert out == [Window(S0, None, frozenset({"old", "a", "b"}))]
