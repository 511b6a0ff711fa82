"""The `world` fixture: a started local world (Stripe, Jira, Zendesk, email, warehouse stand-ins),
fresh for every test, on random loopback ports; plus `clock` for
tests of the search lag and `poll_until` for conditions that other threads bring about."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from agentsaga_lab.world import ManualClock, World

T = TypeVar("T")


@pytest.fixture
def world() -> Iterator[World]:
    """A started World with no search lag; tests change it with `world.set_search_lag(...)`."""
    w = World(search_lag=0.0, search_rate=20.0).start()
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def clock(world: World) -> ManualClock:
    """Put `world`'s search lag and rate limit on a clock that moves only by `clock.advance`,
    so that a test of the lag never races the wall clock. Install it before the first write."""
    manual = ManualClock(now=time.monotonic())
    world.config.clock = manual
    return manual


def poll_until(probe: Callable[[], T | None], *, timeout: float = 5.0, every: float = 0.02) -> T:
    """Call `probe` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(every)
