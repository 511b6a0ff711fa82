"""`agentsaga runs`: the runs in the saga log, newest first, one line each."""

from __future__ import annotations

import argparse
import json

from agentsaga.cli.commands import add_dsn, open_log_from
from agentsaga.states import RunState
from agentsaga.store import Run


def configure(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("--state", action="append", type=RunState, choices=list(RunState),
                        metavar="STATE", help="only runs in this state ("
                        + ", ".join(RunState) + "); repeat for more")
    parser.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    with open_log_from(args) as saga_log:
        runs = saga_log.runs(states=args.state)
    newest = sorted(runs, key=lambda r: r.created_at, reverse=True)[: max(0, args.limit)]
    if args.json:
        print(json.dumps([_run_json(r) for r in newest], default=str, indent=2))
    else:
        print(format_runs(newest, total=len(runs)))
    return 0


def _run_json(run: Run) -> dict[str, object]:
    pivot = run.pivot
    return {"run_id": run.run_id, "state": run.state, "agent": run.agent,
            "namespace": run.namespace, "owner": run.owner, "owner_epoch": run.owner_epoch,
            "pivot": None if pivot is None else pivot.state,
            "plan_hash": None if pivot is None else pivot.plan_hash,
            "irreversible_before_pivot": run.irreversible_before_pivot,
            "created_at": run.created_at}


def format_runs(runs: list[Run], *, total: int) -> str:
    header = ("run", "state", "pivot", "agent", "namespace", "started")
    rows = [(r.run_id, str(r.state), "-" if r.pivot is None else str(r.pivot.state), r.agent or "-",
             r.namespace or "-", r.created_at.strftime("%Y-%m-%d %H:%M:%S")) for r in runs]
    if not rows:
        return "no runs in this saga log yet (a run begins with the client's begin_run)"
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    if total > len(rows):
        lines.append(f"({total - len(rows)} older runs not shown; --limit N shows more)")
    return "\n".join(lines)
