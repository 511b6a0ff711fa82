"""The world's lagging index and search rate limit, on a clock that moves only when told to:
a document is visible exactly one lag after its write, and a search slot frees exactly one
second after it was taken, wherever the clock started (the tests' `clock` fixture starts it at
the machine's monotonic time, a different float on every run)."""

from __future__ import annotations

import pytest

from agentsaga_lab.world.index import LaggedIndex, ManualClock, RateLimiter, WorldConfig

# 65788.00648523099 is a start at which, in floating point, 0.29 s then 0.01 s fell short of 0.3 s
STARTS = [0.0, 65788.00648523099, 1234.5678901, 987654.321, 3.3e6 + 0.1]


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize(("lag", "steps"), [(0.3, [0.29, 0.01]), (0.4, [0.39, 0.01]),
                                            (0.3, [0.1, 0.1, 0.1]), (0.5, [0.5])])
def test_a_write_is_visible_exactly_one_lag_later(start: float, lag: float,
                                                  steps: list[float]) -> None:
    clock = ManualClock(now=start)
    index = LaggedIndex(WorldConfig(search_lag=lag, clock=clock))
    index.put("d1", {"v": 1})
    for step in steps[:-1]:
        clock.advance(step)
        assert index.visible() == []
    clock.advance(steps[-1] - 1e-6)
    assert index.visible() == []  # a microsecond short of the lag
    clock.advance(1e-6)
    assert index.visible() == [{"v": 1}]


@pytest.mark.parametrize("start", STARTS)
def test_a_search_slot_frees_exactly_one_second_after_it_was_taken(start: float) -> None:
    clock = ManualClock(now=start)
    limiter = RateLimiter(WorldConfig(search_rate=2, clock=clock))
    assert limiter.allow() and limiter.allow()
    assert not limiter.allow()
    for step in (0.7, 0.29):
        clock.advance(step)
        assert not limiter.allow()
    clock.advance(0.01)
    assert limiter.allow() and limiter.allow()
    assert not limiter.allow()
