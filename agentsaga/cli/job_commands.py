"""`agentsaga reconcile --run RUN` and `agentsaga unwind --run RUN`: one-shot jobs from the same
image as the sidecar (the operator starts them for orphaned runs). Both adopt the run (R12),
print how they resolved it (what they found, compensated and queued: a `ResolutionReport`),
and exit 0 only when nothing is left:

    0   settled, and nothing waits for a person
    1   something is left unsettled that running the command again may settle
    3   only a person can go on: a step no lookup can settle, or a correction to decide or
        send (each is printed with the command that does it)
    75  (`--no-wait`) only time is missing: a row is UNKNOWN because its absence is not yet
        certain (R7: the call's deadline plus the time its effect takes to show has not
        passed); the command says when to run it again

Without `--no-wait` such rows are waited for, with a countdown on stderr; the operator's Jobs
wait."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from agentsaga import telemetry
from agentsaga.cli.commands import open_log_from
from agentsaga.errors import ConfigurationError
from agentsaga.loading import CONNECTORS, load_tools
from agentsaga.redact import redact_text
from agentsaga.saga.resolution import Sleep, reconcile_run, unwind_run
from agentsaga.saga.resolution_report import ResolutionReport
from agentsaga.settings import Settings
from agentsaga.time_contract import parse_overrides

NOT_YET_CERTAIN = 75
"""Exit code of `--no-wait` when only waiting is left (EX_TEMPFAIL): run again later."""


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="the run id")
    parser.add_argument("--dsn", help="Postgres DSN (default: AGENTSAGA_DSN, else the embedded "
                        "Postgres under AGENTSAGA_DATA_DIR, by default ~/.local/share/agentsaga)")
    parser.add_argument("--tools", action="append", default=None, metavar="MODULE",
                        help="a module (or a file such as ./mytools.py) that registers the "
                        "tools; repeat for more (default: AGENTSAGA_TOOLS, else "
                        "agentsaga.connectors.tools)")
    parser.add_argument("--owner", default="", help="who adopts the run (default: host:pid)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-wait", action="store_true",
                        help="do not wait for an unknown step's absence to become certain (R7): "
                        f"exit {NOT_YET_CERTAIN} and say when to run again")


configure_reconcile = _configure
configure_unwind = _configure


def _resolve(args: argparse.Namespace, action: str) -> int:
    settings = Settings.from_env()
    telemetry.setup(f"agentsaga-{action}")  # spans continue the run's trace (OTEL_* env)
    modules = args.tools or list(settings.tools) or [CONNECTORS]
    try:
        registry = load_tools(modules)
        registry.override_timing(parse_overrides(settings.connectors.time_contracts))
    except ConfigurationError as exc:
        if args.tools or settings.tools:
            raise
        raise ConfigurationError(
            f"{action} needs the run's tools to look its steps up by key: pass --tools MODULE "
            "(the sidecar's AGENTSAGA_TOOLS; a module name or a file such as ./mytools.py). "
            f"Tried the default: {exc}") from None
    owner = args.owner or f"{action}:{socket.gethostname()}:{os.getpid()}"
    try:
        with open_log_from(args, hooks=telemetry.TelemetryHooks()) as saga_log:
            fn = reconcile_run if action == "reconcile" else unwind_run
            report: ResolutionReport = fn(saga_log, registry, args.run, owner,
                                      recheck_pause_s=settings.recheck_pause_s,
                                      wait=None if args.no_wait else countdown)
    finally:
        telemetry.shutdown()  # flush before the Job's container exits
    print(json.dumps(report.to_json(), indent=2, default=str) if args.json else render(report))
    return exit_code(report, action)


NEEDS_HUMAN_EXIT = 3
"""The exit code of a reconcile or unwind after which only a person can go on."""


def exit_code(report: ResolutionReport, action: str = "") -> int:
    """0 settled; NOT_YET_CERTAIN when only time is missing (`--no-wait`); NEEDS_HUMAN_EXIT
    when a person must act; 1 when running again may settle the rest."""
    if report.settled and not report.needs_human:
        return 0
    if report.wait_s is not None:
        again = datetime.now(UTC) + timedelta(seconds=report.wait_s)
        print(f"not yet certain: run `agentsaga {action} --run {report.run_id}` again after "
              f"{again:%Y-%m-%d %H:%M:%S} UTC (in {report.wait_s:.0f}s), or without --no-wait "
              "to wait for it", file=sys.stderr)
        return NOT_YET_CERTAIN
    if report.needs_human:
        return NEEDS_HUMAN_EXIT
    return 1


def countdown(seconds: float, report: ResolutionReport, *, sleep: Sleep = time.sleep,
              out: TextIO | None = None) -> None:
    """Wait `seconds` for the unsettled rows' certainty, saying what for and how long is left
    (a line per second on a terminal, every 10 s in a Job's log)."""
    stream = out or sys.stderr
    steps = ", ".join(f"step {u['step_idx']} {u['tool']}" for u in report.unsettled)
    print(f"waiting {seconds:.1f}s until it is certain whether {steps} happened (R7)",
          file=stream, flush=True)
    every = 1.0 if stream.isatty() else 10.0
    left = seconds
    while left > 0:
        pause = min(left, every)
        sleep(pause)
        left -= pause
        if left > 0:
            print(f"  {left:.0f}s left", file=stream, flush=True)


def render(report: ResolutionReport) -> str:
    """The report as a person reads it: what was found, compensated, queued, left."""
    done = "settled" if report.settled else "NOT settled"
    if report.needs_human:
        done += f", WAITING FOR A PERSON ({len(report.waiting)})"
    lines = [f"{report.action} of run {report.run_id} (epoch {report.epoch}): {done}"]
    sections = [("found by key", report.reconciled), ("compensated", report.compensated),
                ("queued as corrections", report.queued),
                ("compensation failed (needs a human)", report.failed),
                ("compensation outcome unknown (run unwind again)", report.pending),
                ("still unknown" + (" (certain once its time has passed)"
                                    if report.wait_s is not None else " (needs a human)"),
                 report.unsettled),
                ("corrections (internal first)", report.corrections)]
    for title, items in sections:
        if items:
            lines.append(f"  {title}:")
            lines += [f"    {_line(item)}" for item in items]
    if report.waiting:
        lines.append("  waiting for a person (the run is not done until each is settled):")
        lines += [f"    step {w['step_idx']} {w['tool']}: {w['what']}; run: {w['command']}"
                  for w in report.waiting]
    return redact_text("\n".join(lines))  # a failed compensation's why quotes a real system


def _line(item: dict[str, Any]) -> str:
    head = f"step {item.get('step_idx')} {item.get('tool')}"
    rest = ", ".join(f"{k}={v}" for k, v in item.items() if k not in ("step_idx", "tool"))
    return f"{head}: {rest}" if rest else head


def run_reconcile(args: argparse.Namespace) -> int:
    return _resolve(args, "reconcile")


def run_unwind(args: argparse.Namespace) -> int:
    return _resolve(args, "unwind")
