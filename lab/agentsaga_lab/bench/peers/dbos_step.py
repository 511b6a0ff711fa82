"""DBOS Transact peer: one workflow of N no-op steps on the same Postgres; each step timed.

Run by the bench in its peers environment: `python dbos_step.py DSN CALLS`; prints JSON."""

import json
import sys
import time
from urllib.parse import quote

from dbos import DBOS
from psycopg.conninfo import conninfo_to_dict


def url(dsn: str) -> str:
    """A libpq DSN (key=value, maybe a unix socket) as the URL SQLAlchemy wants."""
    p = conninfo_to_dict(dsn)
    host = str(p.get("host", "localhost"))
    auth = quote(str(p.get("user", "postgres"))) + (
        ":" + quote(str(p["password"])) if p.get("password") else "")
    db = p.get("dbname", "postgres")
    if host.startswith("/"):
        return f"postgresql://{auth}@/{db}_dbos?host={quote(host)}"
    return f"postgresql://{auth}@{host}:{p.get('port', 5432)}/{db}_dbos"


dsn, calls = sys.argv[1], int(sys.argv[2])
DBOS(config={"name": "agentsaga-bench", "system_database_url": url(dsn),
             "run_admin_server": False})


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
