"""`agentsaga prune --ended-before DURATION`: retention of the saga log.

Removes the runs that ended (succeeded, failed, unwound) more than DURATION ago, with their rows
and corrections, in batches of whole runs (`agentsaga.store.retention` says which runs qualify:
never an open run, never one with an unsettled row or a correction that still waits). Safe to
stop at any moment and to run again; the chart runs it as a CronJob (`retention.*` values).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
from collections.abc import Callable

from agentsaga import crashpoints
from agentsaga.cli.commands import add_dsn, open_log_from
from agentsaga.store.retention import Pruned

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
PruneBatch = Callable[[datetime.datetime, int], Pruned]
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def duration(text: str) -> datetime.timedelta:
    """`90d`, `12h`, `1h30m`, `3600s` → a timedelta (argparse type; a clear error otherwise)."""
    parts = _DURATION.findall(text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: write a number and a unit (s, m, h, d, w), "
            "e.g. 30d, 12h or 1h30m")
    return datetime.timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))


def configure(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("--ended-before", type=duration, required=True, metavar="DURATION",
                        help="remove runs that ended longer ago than this (e.g. 30d, 12h)")
    parser.add_argument("--batch", type=int, default=500,
                        help="runs removed per transaction (default 500)")
    parser.add_argument("--max-runs", type=int, default=None,
                        help="stop after removing this many runs (default: all that qualify)")
    parser.add_argument("--dry-run", action="store_true",
                        help="count what would be removed, remove nothing")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a line")


def run(args: argparse.Namespace) -> int:
    if args.batch <= 0:
        raise SystemExit("agentsaga prune: --batch must be a positive number of runs")
    if args.max_runs is not None and args.max_runs < 0:
        raise SystemExit("agentsaga prune: --max-runs must not be negative")
    cutoff = datetime.datetime.now(datetime.UTC) - args.ended_before
    with open_log_from(args, role="migrate") as saga_log:  # deleting history is maintenance
        if args.dry_run:
            total = saga_log.prunable(cutoff, args.max_runs if args.max_runs is not None
                                      else 2**62)
        else:
            total = prune(saga_log.prune_batch, cutoff, args.batch, args.max_runs)
    verb = "would remove" if args.dry_run else "removed"
    if args.json:
        print(json.dumps({"cutoff": cutoff.isoformat(), "dry_run": args.dry_run,
                          "runs": total.runs, "steps": total.steps,
                          "corrections": total.corrections}))
    else:
        print(f"{verb} {total.runs} runs ({total.steps} steps, {total.corrections} corrections)"
              f" that ended before {cutoff:%Y-%m-%d %H:%M:%S} UTC")
    return 0


def prune(batch_fn: PruneBatch, cutoff: datetime.datetime, batch: int,
          max_runs: int | None) -> Pruned:
    """Batches until none is left (or `max_runs` were removed); each batch commits on its own."""
    total = Pruned()
    while max_runs is None or total.runs < max_runs:
        size = batch if max_runs is None else min(batch, max_runs - total.runs)
        done = batch_fn(cutoff, size)
        total = total + done
        crashpoints.reach("after_prune_batch")
        if done.runs < size:
            break
    return total

