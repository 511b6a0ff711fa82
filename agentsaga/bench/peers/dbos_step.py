"""DBOS Transact peer: one workflow of N no-op steps on the same Postgres; each step timed.

Run by the bench in its peers environment: `python dbos_step.py DSN CALLS`; prints JSON."""

import json
import sys
import time

from dbos import DBOS

dsn, calls = sys.argv[1], int(sys.argv[2])
DBOS(config={"name": "agentsaga-bench", "system_database_url": dsn, "run_admin_server": False})


@DBOS.step()
def noop(n: int) -> int:
    return n


@DBOS.workflow()
def steps(count: int) -> list[float]:
    out = []
    for i in range(count):
        start = time.perf_counter()
        noop(i)
        out.append((time.perf_counter() - start) * 1000.0)
    return out


DBOS.launch()
steps(20)  # warm up
latencies = steps(calls)
DBOS.destroy()
print(json.dumps({"latencies_ms": latencies}))
