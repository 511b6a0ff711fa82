"""Whether a run's figures describe the machine or its neighbours: the load before the run, and
the load others put on the machine while it ran.

    at the start ...... the 1-minute load average; above the core count, `--write-docs` refuses
                        to measure (unless told the page may say it is not representative)
    during the run .... sampled every `interval` seconds: the 1-minute load average, less what
                        the bench's own processes (this one, its children and the embedded
                        Postgres with its backends) kept busy over the last minute, in cores.
                        Above the core count at any sample, the figures are not representative.

The bench's own processes load the machine too (a sidecar, Postgres and the client are busy at
once during the throughput loads), so its own share is taken out: what is left is what the
neighbours did. Where they cannot be told apart (a Postgres given with --dsn is counted as a
neighbour), the figures are the more likely to be marked, never the less.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cores() -> int:
    return os.cpu_count() or 1


def load_now() -> float:
    return os.getloadavg()[0]


def loaded(load: float, cpus: int) -> bool:
    """Whether a 1-minute load makes a run's figures unrepresentative on `cpus` cores."""
    return load > cpus


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, CPU ticks of the process and its reaped children), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    # after the name: state ppid ... utime(14) stime(15) cutime(16) cstime(17), 1-based overall
    return int(fields[1]), sum(int(f) for f in fields[11:15])


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def own_ticks(roots: set[int]) -> int:
    """CPU ticks of `roots` and every process descending from them."""
    stats = {pid: s for pid in _pids() if (s := _stat(pid)) is not None}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo, seen = 0, [r for r in roots if r in stats], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def postmaster_pid(data_dir: Path | None) -> int | None:
    """The embedded Postgres's main process (first line of postmaster.pid), if any."""
    if data_dir is None:
        return None
    try:
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Reading:
    start: float
    """The 1-minute load average when the run began."""
    most: float
    """The highest 1-minute load average seen during the run."""
    others_most: float
    """The highest load the bench's neighbours put on the machine (the load average less the
    bench's own busy cores over the last minute)."""
    cpus: int

    @property
    def representative(self) -> bool:
        return not loaded(self.start, self.cpus) and not loaded(self.others_most, self.cpus)


class LoadWatch:
    """Samples the load while a run lasts (a daemon thread); `stop()` gives the Reading."""

    def __init__(self, roots: Callable[[], set[int]] | None = None, *,
                 interval: float = 2.0) -> None:
        self._roots = roots or (lambda: {os.getpid()})
        self._interval = interval
        self._stop = threading.Event()
        self._start = load_now()
        self._most = self._start
        self._others = 0.0
        self._window: deque[tuple[float, int]] = deque()
        self._thread = threading.Thread(target=self._run, name="bench-load", daemon=True)

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        now, load = time.monotonic(), load_now()
        self._window.append((now, own_ticks(self._roots())))
        while len(self._window) > 2 and now - self._window[1][0] >= 60.0:
            self._window.popleft()
        first_at, first_ticks = self._window[0]
        span = now - first_at
        # the bench's busy cores over (up to) the last minute; its processes' ticks only grow
        # while they live, and a process that ended takes its ticks with it: never below 0
        own = max(0.0, (self._window[-1][1] - first_ticks) / _TICKS / span) if span > 0 else 0.0
        self._most = max(self._most, load)
        self._others = max(self._others, load - own)

    def _run(self) -> None:
        self.sample()
        while not self._stop.wait(self._interval):
            self.sample()

    def reading(self) -> Reading:
        return Reading(round(self._start, 2), round(self._most, 2), round(self._others, 2),
                       cores())
