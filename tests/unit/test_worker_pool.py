"""The sidecar's worker pool: few threads busy at once, a thread of its own for a call while
the busy ones wait on slow systems (`agentsaga.waiting`), never more than `most`; results,
errors and shutdown as an executor's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures

import pytest

from agentsaga.sidecar.worker_pool import WorkerPool
from agentsaga.waiting import WaitingLock, waiting

WAIT_S = 10.0  # only a bound on a failing test: every wait below ends on an event


def wait_until(probe: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not probe():
        assert time.monotonic() < deadline, "the pool never got there"
        time.sleep(0.005)


def test_work_goes_to_the_thread_that_went_idle_last() -> None:
    pool = WorkerPool(hot=3, most=8, stuck_after_s=60)
    gate = threading.Barrier(4)
    calls = [pool.submit(gate.wait, WAIT_S) for _ in range(3)]
    gate.wait(WAIT_S)  # three threads, each running a call at the same time
    for call in calls:
        call.result(WAIT_S)
    wait_until(lambda: pool.idle == 3)
    names = []
    for _ in range(20):
        names.append(pool.submit(lambda: threading.current_thread().name).result(WAIT_S))
        wait_until(lambda: pool.idle == 3)
    assert len(set(names)) == 1  # the other two stay idle (and would end after idle_exit_s)
    assert pool.started == 3
    pool.shutdown()


def test_quick_calls_never_start_more_than_the_hot_threads() -> None:
    pool = WorkerPool(hot=3, most=32, stuck_after_s=60)
    submitted: list[futures.Future[int]] = []
    lock = threading.Lock()

    def submitter(base: int) -> None:
        for i in range(200):
            future = pool.submit(pow, base, i, 1_000_003)
            with lock:
                submitted.append(future)

    threads = [threading.Thread(target=submitter, args=(b,)) for b in range(2, 18)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = sorted(f.result(WAIT_S) for f in submitted)
    assert results == sorted(pow(b, i, 1_000_003) for b in range(2, 18) for i in range(200))
    assert pool.started <= 3
    pool.shutdown()


def test_calls_held_by_a_slow_system_get_threads_of_their_own_up_to_most() -> None:
    pool = WorkerPool(hot=2, most=5, stuck_after_s=0.01)
    release = threading.Event()
    running = threading.Semaphore(0)
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    def slow(i: int) -> int:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        running.release()
        with waiting():  # a real system's time
            assert release.wait(WAIT_S)
        with lock:
            in_flight -= 1
        return i

    held = [pool.submit(slow, i) for i in range(7)]
    for _ in range(5):  # five run at once although only two threads are hot
        assert running.acquire(timeout=WAIT_S)
    assert pool.threads == 5
    assert not any(f.done() for f in held)
    release.set()
    assert [f.result(WAIT_S) for f in held] == list(range(7))
    assert peak == 5  # the two queued behind `most` waited for a thread to finish
    pool.shutdown()


def test_calls_that_work_are_not_given_more_threads_than_hot() -> None:
    """A call that blocks without marking its wait (CPU, a database statement) keeps its
    thread busy: the next call queues for it rather than wake another thread."""
    pool = WorkerPool(hot=2, most=8, stuck_after_s=0.001)
    release = threading.Event()
    running = threading.Semaphore(0)

    def busy() -> None:
        running.release()
        assert release.wait(WAIT_S)

    held = [pool.submit(busy) for _ in range(3)]
    for _ in range(2):
        assert running.acquire(timeout=WAIT_S)
    time.sleep(0.05)  # fifty times stuck_after_s: a pool that grew would have started it
    assert not running.acquire(blocking=False)
    assert pool.threads == 2
    release.set()
    for call in held:
        call.result(WAIT_S)
    assert running.acquire(timeout=WAIT_S)  # the third ran once a thread was free
    pool.shutdown()


def test_a_contended_run_lock_is_a_wait() -> None:
    """Calls of one run queued on its lock behind a slow call do not hold the busy threads:
    another run's call still gets a thread."""
    pool = WorkerPool(hot=2, most=8, stuck_after_s=0.005)
    run_lock, release = WaitingLock(), threading.Event()

    def slow_call_of_the_run() -> None:
        with run_lock, waiting():
            assert release.wait(WAIT_S)

    first = pool.submit(slow_call_of_the_run)
    queued_on_the_lock = [pool.submit(slow_call_of_the_run) for _ in range(3)]
    other_run = pool.submit(lambda: "answered")
    assert other_run.result(WAIT_S) == "answered"
    release.set()
    for call in [first, *queued_on_the_lock]:
        call.result(WAIT_S)
    pool.shutdown()


def test_waiting_outside_a_pool_changes_nothing() -> None:
    lock = WaitingLock()
    with waiting(), lock:
        assert not lock.acquire(blocking=False)
    assert lock.acquire(blocking=False)
    lock.release()


def test_idle_threads_end() -> None:
    pool = WorkerPool(hot=2, most=4, stuck_after_s=0.01, idle_exit_s=0.05)
    gate = threading.Barrier(3)
    calls = [pool.submit(gate.wait, WAIT_S) for _ in range(2)]
    gate.wait(WAIT_S)
    for call in calls:
        call.result(WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while pool.threads:
        assert time.monotonic() < deadline, "idle threads never ended"
        time.sleep(0.01)
    assert pool.submit(lambda: 7).result(WAIT_S) == 7  # a new thread once one is needed
    pool.shutdown()


def test_errors_reach_the_caller_and_the_thread_goes_on() -> None:
    pool = WorkerPool(hot=1, most=1)

    def fails() -> None:
        raise ValueError("bad arguments")

    with pytest.raises(ValueError, match="bad arguments"):
        pool.submit(fails).result(WAIT_S)
    assert pool.submit(lambda: "next").result(WAIT_S) == "next"
    assert pool.started == 1
    pool.shutdown()


def test_shutdown_waits_for_calls_in_flight_and_refuses_new_ones() -> None:
    pool = WorkerPool(hot=1, most=2, stuck_after_s=60)
    started, finish = threading.Event(), threading.Event()

    def call() -> str:
        started.set()
        assert finish.wait(WAIT_S)
        return "recorded"

    in_flight = pool.submit(call)
    queued = pool.submit(lambda: "queued")
    assert started.wait(WAIT_S)
    stopper = threading.Thread(target=pool.shutdown)
    stopper.start()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(lambda: None)
    assert stopper.is_alive()  # still waiting for the call in flight
    finish.set()
    stopper.join(WAIT_S)
    assert not stopper.is_alive()
    assert in_flight.result(0) == "recorded" and queued.result(0) == "queued"
    assert pool.threads == 0


def test_cancelled_queued_calls_never_run() -> None:
    pool = WorkerPool(hot=1, most=1, stuck_after_s=60)
    gate = threading.Event()
    ran: list[str] = []
    first = pool.submit(gate.wait, WAIT_S)
    queued = pool.submit(ran.append, "queued")
    assert queued.cancel()
    gate.set()
    assert first.result(WAIT_S) is True
    assert pool.submit(ran.append, "after").result(WAIT_S) is None
    assert ran == ["after"]
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize(("hot", "most"), [(0, 4), (5, 4)])
def test_sizes_out_of_order_are_refused(hot: int, most: int) -> None:
    with pytest.raises(ValueError, match="hot"):
        WorkerPool(hot=hot, most=most)
