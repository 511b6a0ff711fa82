"""The threads that run the sidecar's RPCs: few of them busy at once, and a thread of its own
for a call whenever those are waiting on slow systems.

A gRPC server hands each RPC to an executor. With as many threads as runs in flight, every RPC
wakes a sleeping thread, and on a small machine the wake-ups cost more than the work (measured
at 32 runs on 2 cores: 18–19 context switches a dispatch with 32 threads, 9 with 8, and
1.27–1.34× the throughput with 8). With a few threads only, a tool that takes seconds holds one
for seconds, and a few such calls would stop every other run. So:

- a thread is *busy* while it runs a call, unless it has waited on another system
  (`agentsaga.waiting`: a tool's call, a lookup, a decision, a run's lock) for `stuck_after_s`;
- a call is handed to a thread only while fewer than `hot` are busy; otherwise it is queued,
  and a thread that finishes takes the next queued call without sleeping;
- an idle thread is woken last-in first-out: work goes to the most recently busy thread, and
  the threads at the bottom stay idle until `idle_exit_s` ends them;
- a watcher hands queued calls to other threads (started up to `most`) once busy threads
  have waited `stuck_after_s`; it sleeps unless calls are queued and a thread waits.

`most` bounds the calls in flight, as `ThreadPoolExecutor(max_workers=most)` did.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

from agentsaga import waiting

STUCK_AFTER_S = 0.005
"""A thread waiting this long on another system no longer counts as busy. A marked wait
(`agentsaga.waiting`) holds Python code too (the tool's own, its HTTP client's), which under
load waits for the GIL (`sys.getswitchinterval()`, 5 ms): one interval keeps a tool that answers
at once from looking like a wait (at 32 runs of such tools a sidecar started no thread beyond
its 8 even at 2 ms). Longer costs calls that do wait: at 20 ms, tools waiting 20 ms went
through 8 threads only, half the throughput of 32."""
IDLE_EXIT_S = 30.0
"""A thread idle this long ends (down to none: a quiet sidecar holds no idle threads)."""

__all__ = ["IDLE_EXIT_S", "STUCK_AFTER_S", "WorkerPool"]


@dataclass
class _Call:
    future: futures.Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:  # the caller's future carries it, as in ThreadPoolExecutor
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


@dataclass(eq=False)
class _Thread:
    """One thread of the pool: the call it is handed, and since when it waits
    (`agentsaga.waiting`; None while it works)."""

    pool: WorkerPool
    call: _Call | None = None
    wake: threading.Event = field(default_factory=threading.Event)
    waiting_since: float | None = None

    def wait_begins(self) -> None:
        self.waiting_since = time.monotonic()
        if self.pool._queued:  # calls wait for a thread: the watcher times this wait
            with self.pool._lock:
                self.pool._queue_not_empty.notify()

    def wait_ends(self) -> None:
        self.waiting_since = None


class WorkerPool(futures.Executor):
    def __init__(self, *, hot: int, most: int, name: str = "worker",
                 stuck_after_s: float = STUCK_AFTER_S, idle_exit_s: float = IDLE_EXIT_S) -> None:
        if not 1 <= hot <= most:
            raise ValueError(f"the pool needs 1 <= hot ({hot}) <= most ({most})")
        self.hot, self.most, self.name = hot, most, name
        self.stuck_after_s, self.idle_exit_s = stuck_after_s, idle_exit_s
        self._lock = threading.Lock()
        self._queued: deque[_Call] = deque()
        self._queue_not_empty = threading.Condition(self._lock)  # the watcher waits here
        self._all_ended = threading.Condition(self._lock)  # shutdown(wait=True) waits here
        self._busy: set[_Thread] = set()
        self._idle: list[_Thread] = []  # a stack: the last thread to finish is woken first
        self._threads = 0
        self._started = 0
        self._shutdown = False
        self._watcher = threading.Thread(target=self._watch, name=f"{name}-watch", daemon=True)
        self._watcher.start()

    # -- the executor ----------------------------------------------------------------------

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        call = _Call(futures.Future(), fn, args, kwargs)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule a call after the pool was shut down")
            self._queued.append(call)
            self._hand_queued(time.monotonic())
            if self._queued:
                self._queue_not_empty.notify()
        return call.future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Queued calls still run (unless `cancel_futures`); with `wait`, returns once every
        thread has ended, the calls in flight finished."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._queued:
                    self._queued.popleft().future.cancel()
            for idle in self._idle:
                idle.wake.set()  # with no call: end
            self._idle.clear()
            self._queue_not_empty.notify()
        if wait:
            with self._lock:
                while self._threads:
                    self._all_ended.wait()

    # -- what the tests and the bench read -------------------------------------------------

    @property
    def threads(self) -> int:
        with self._lock:
            return self._threads

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    @property
    def started(self) -> int:
        """Threads started since the pool was made."""
        with self._lock:
            return self._started

    # -- handing out calls (the lock held) -------------------------------------------------

    def _busy_count(self, now: float) -> tuple[int, float | None]:
        """How many threads are busy (running a call, not waiting for `stuck_after_s`), and
        when the first of those waiting now will stop counting (None: none waits)."""
        busy, soonest = 0, None
        for thread in self._busy:
            since = thread.waiting_since
            if since is None:
                busy += 1
            elif since + self.stuck_after_s > now:
                busy += 1
                soonest = since + self.stuck_after_s if soonest is None else min(
                    soonest, since + self.stuck_after_s)
        return busy, soonest

    def _hand_queued(self, now: float) -> None:
        """Queued calls to idle or new threads, oldest first, while fewer than `hot` are
        busy (or, shut down, to end sooner) and fewer than `most` run."""
        busy, _ = self._busy_count(now)
        while self._queued and (busy < self.hot or self._shutdown):
            if self._idle:
                thread = self._idle.pop()
                thread.call = self._queued.popleft()
                self._busy.add(thread)
                thread.wake.set()
            elif self._threads < self.most:
                self._start(self._queued.popleft())
            else:
                return
            busy += 1

    def _start(self, call: _Call) -> None:
        self._started += 1
        self._threads += 1
        record = _Thread(self, call)
        self._busy.add(record)
        threading.Thread(target=self._work, args=(record,), name=f"{self.name}-{self._started}",
                         daemon=True).start()

    # -- the threads -----------------------------------------------------------------------

    def _work(self, me: _Thread) -> None:
        waiting.register(me)
        call, me.call = me.call, None
        while call is not None:
            call.run()
            del call  # the call's result and arguments are not held while idle
            with self._lock:
                self._busy.discard(me)
                if self._queued and (self._shutdown
                                     or self._busy_count(time.monotonic())[0] < self.hot):
                    call = self._queued.popleft()  # the next one, without sleeping
                    self._busy.add(me)
                    continue
                if self._shutdown:
                    break
                me.wake.clear()
                self._idle.append(me)
            me.wake.wait(self.idle_exit_s)
            with self._lock:
                if me.call is None and me in self._idle:
                    self._idle.remove(me)  # idle too long: end
                call, me.call = me.call, None
        with self._lock:
            self._threads -= 1
            if self._shutdown and not self._threads:
                self._all_ended.notify_all()

    def _watch(self) -> None:
        """Hand queued calls to other threads once busy ones have waited `stuck_after_s`.
        Woken by a call queued and by a wait begun while calls are queued; a thread that works
        needs no watching: it takes the next queued call when it finishes."""
        with self._lock:
            while not self._shutdown:
                now = time.monotonic()
                self._hand_queued(now)
                _, soonest = self._busy_count(now)
                if not self._queued or soonest is None:
                    self._queue_not_empty.wait()
                else:
                    self._queue_not_empty.wait(max(soonest - now, 0.0))
