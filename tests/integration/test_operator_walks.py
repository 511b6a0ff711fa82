"""What keeps the operator idle at scale, against a real saga log: the binding loop's rounds
(`run_walk`) bind every open run of a namespace at start-up, then a bounded slice of them per
round plus what changed and what failed, never every open run per round; the log watch's
fingerprint, read in SQL for a batch of runs, equals the one a resync pass computes from what
it read (else every round would wake every run again); the bounded resync wakes a steady share
of the runs."""

from __future__ import annotations

import asyncio
import itertools

import psycopg

from agentsaga.keys import log_run_id, step_key
from agentsaga.operator.gauges import RunGauges
from agentsaga.operator.log_watch import LogWatch
from agentsaga.operator.run_facts import facts, facts_since, fingerprint
from agentsaga.operator.run_walk import OpenRunWalk
from agentsaga.settings import OperatorSettings
from agentsaga.states import RunState, StepStatus
from agentsaga.store import SagaLog

OPEN = [log_run_id("default", f"run-{i:02d}") for i in range(12)]
ENDED = [log_run_id("default", f"ended-{i}") for i in range(3)]
NEW, FP = log_run_id("default", "run-new"), log_run_id("default", "fp")


class Steps:
    """A monotonic clock that moves by a resync interval per round."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _runs(saga_log: SagaLog, dsn: str) -> None:
    """The open and ended runs, last changed an hour ago (a round sees only newer changes)."""
    for run_id in OPEN + ENDED:
        saga_log.begin_run(run_id, agent="bench", namespace="default")
    saga_log.begin_run("outside", agent="bench")  # no namespace: no AgentRun to bind
    for run_id in ENDED:
        saga_log.set_run_state(run_id, 1, RunState.SUCCEEDED, end=True)
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE saga_runs SET updated_at = now() - interval '1 hour'")


def test_the_binding_rounds_walk_every_open_run_once_per_full_resync(pg: str) -> None:
    config = OperatorSettings(resync_seconds=10.0, full_resync_seconds=40.0, resync_batch=5)
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        _runs(saga_log, pg)
        walk = OpenRunWalk(saga_log, config, monotonic=Steps(10.0))
        first = [r.run_id for r in walk.round()]
        assert sorted(first) == OPEN  # start-up: every open run of a namespace, none ended

        slice_size = len(OPEN) * 10 // 40
        rounds = [[r.run_id for r in walk.round()] for _ in range(len(OPEN) // slice_size)]
        assert all(len(r) == slice_size for r in rounds), rounds
        assert sorted(itertools.chain(*rounds)) == OPEN  # a full walk: each open run once

        saga_log.begin_run(NEW, agent="bench", namespace="default")
        walk.failed.add(OPEN[5])
        changed = [r.run_id for r in walk.round()]
        # the new run (changed since the last round), the one that failed, then the walk's
        # next slice (here the end of the ids: the walk starts over after it), each run once
        assert changed[:2] == [NEW, OPEN[5]]
        assert len(changed) == len(set(changed))
        # the next round: run-new again (changed within a round and an interval), and the
        # walk from the start, its slices sized for the 13 open runs it found (3.25 a round)
        assert [r.run_id for r in walk.round()] == [NEW, *OPEN[:3]]

        walk.lost()
        assert sorted(r.run_id for r in walk.round()) == sorted([*OPEN, NEW])


def test_the_fingerprint_read_in_sql_is_the_one_a_pass_computes(pg: str) -> None:
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        saga_log.begin_run(FP, agent="bench", namespace="default")
        outcomes = {"create_ticket": StepStatus.CONFIRMED, "send_email": StepStatus.UNKNOWN}
        for idx, (tool, status) in enumerate(outcomes.items()):
            saga_log.record_intent(FP, 1, idx, tool=tool, tool_class="compensatable",
                                   key=step_key(FP, idx, tool), args={"n": idx},
                                   compensation={"tool": "close_ticket", "args": {}},
                                   audience=())
            saga_log.record_outcome(FP, 1, idx, status, error="timed out")
        before = facts(saga_log, FP)
        assert saga_log.log_fingerprints([FP])[FP] == fingerprint(before)
        assert facts_since(saga_log, FP, before) is before  # unchanged: not read again

        saga_log.ask_human(FP, 1, 1, step_key(FP, 1, "send_email"), "no lookup")
        after = facts(saga_log, FP)
        assert after.awaiting_human == [1]
        assert saga_log.log_fingerprints([FP])[FP] == fingerprint(after)
        assert fingerprint(after) != fingerprint(before)  # the log watch wakes the run
        assert facts_since(saga_log, FP, before).awaiting_human == [1]


def test_the_bounded_resync_wakes_a_steady_share_of_the_runs() -> None:
    async def walk() -> list[set[int]]:
        watch = LogWatch(None, interval=10.0, batch=500, gauges=RunGauges(),
                         full_interval=40.0)
        events = [watch.register(("default", f"r{i}"), f"r{i}") for i in range(10)]
        woken: list[set[int]] = []
        for _ in range(4):
            for event in events:
                event.clear()
            watch.walk_once()
            woken.append({i for i, event in enumerate(events) if event.is_set()})
        for i in range(10):
            watch.unregister(("default", f"r{i}"))
        return woken

    woken = asyncio.run(walk())
    # 10 runs × 10 s / 40 s = 2.5 per interval: every run once in 4 intervals
    assert woken == [{0, 1}, {2, 3, 4}, {5, 6}, {7, 8, 9}]
