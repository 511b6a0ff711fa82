"""Pivot decisions delivered as they are recorded: the operator's role writes `pivot_decision`
(`decide_pivot`), and a trigger (migration 016) announces it on the channel
`agentsaga_decisions`, its payload the decided plan's hash and nothing else (any role may LISTEN
on any channel; the hash names no run and no namespace).

A process holds one LISTEN connection for all its waits (`DecisionListener`): opened by its
first wait, closed once no wait has needed it for IDLE_S. Each wait registers a `Watch`, which
is woken when a decision of the plan it awaits is announced, and also each time the
connection is (re)established, since what was announced while none listened is unknown. A
woken wait reads its run again under its own role (row-level security): the notification
says that something was decided, the log says what.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

logger = logging.getLogger(__name__)

CHANNEL = "agentsaga_decisions"
IDLE_S = 30.0
"""How long the LISTEN connection outlives the last wait (waits come in bursts)."""
TICK_S = 0.5
"""How often the listening thread looks whether it should stop."""
RETRY_S = 1.0
"""The pause before connecting again after the connection failed."""
CONNECT_TIMEOUT_S = 10


class Watch:
    """One wait's wake-up: set when a decision it may be waiting for was announced."""

    def __init__(self, listening: threading.Event) -> None:
        self.plan_hash = ""
        """The plan the wait awaits a decision on ('': whichever, e.g. none is staged yet)."""
        self._woken = threading.Event()
        self._listening = listening

    def wait_listening(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for the connection to listen; True once it does (a
        connection slow to come wakes every watch when it does)."""
        return self._listening.wait(max(0.0, timeout))

    def wake(self) -> None:
        self._woken.set()

    def concerns(self, plan_hash: str | None) -> bool:
        """Whether an announcement (None: a new connection, not an announcement) may be of the
        plan this wait awaits."""
        return not plan_hash or not self.plan_hash or plan_hash == self.plan_hash

    def rearm(self) -> None:
        """Forget earlier wake-ups: called just before the wait reads its run, which sees all
        they announced (a wake-up after it is kept for the next `woken`)."""
        self._woken.clear()

    def woken(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for a wake-up since the last `rearm`; True if one
        came."""
        return self._woken.wait(max(0.0, timeout))


class DecisionListener:
    """The LISTEN connection on `agentsaga_decisions` of one process, shared by its waits."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._lock = threading.Lock()
        self._watches: set[Watch] = set()
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()
        self._idle_since = time.monotonic()
        self._closed = False

    @contextmanager
    def watch(self) -> Iterator[Watch]:
        """A wait's `Watch` while the wait lasts; the connection is opened if none is."""
        watch = Watch(self._listening)
        with self._lock:
            self._watches.add(watch)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._listen, daemon=True,
                                                name="agentsaga-decisions")
                self._thread.start()
        try:
            yield watch
        finally:
            with self._lock:
                self._watches.discard(watch)
                self._idle_since = time.monotonic()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake(None)
        if thread is not None:
            thread.join(TICK_S * 4)

    def _wake(self, plan_hash: str | None) -> None:
        with self._lock:
            for watch in self._watches:
                if watch.concerns(plan_hash):
                    watch.wake()

    def _done(self) -> bool:
        """Whether the calling thread should end: closed, idle long enough, or no longer the
        listening thread. It is forgotten then, under the lock, so that the next wait starts
        another."""
        with self._lock:
            if self._thread is not threading.current_thread():
                return True
            if self._closed or (not self._watches
                                and time.monotonic() - self._idle_since >= IDLE_S):
                self._thread = None
                self._listening.clear()
                return True
            return False

    def _listen(self) -> None:
        while True:
            try:
                with psycopg.connect(self.dsn, autocommit=True,
                                     connect_timeout=CONNECT_TIMEOUT_S) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    # announced while nobody listened: unknown. Woken before they hear that the
                    # connection listens: a wait that was waiting for it reads its run next
                    # anyway, and is not woken once more for nothing after that read
                    self._wake(None)
                    self._listening.set()
                    while not self._done():
                        for note in conn.notifies(timeout=TICK_S, stop_after=64):
                            self._wake(note.payload)
                    return
            except Exception as exc:  # the waits read the log themselves meanwhile
                if self._done():
                    return
                self._listening.clear()
                self._wake(None)
                logger.warning("listening for pivot decisions: %s; connecting again", exc)
                time.sleep(RETRY_S)
