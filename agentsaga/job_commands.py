"""`agentsaga reconcile --run RUN` and `agentsaga unwind --run RUN`: one-shot jobs from the same
image as the sidecar (the operator starts them for orphaned runs). Both adopt the run (R12),
print what they found, compensated and queued, and exit 0 only when nothing is left:

    0   settled, and nothing waits for a person
    1   something is left unsettled that running the command again may settle
    3   only a person can go on: a step no lookup can settle, or a correction to decide or
        send (each is printed with the command that does it)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from typing import Any

from agentsaga import telemetry
from agentsaga.commands import open_log_from
from agentsaga.errors import ConfigurationError
from agentsaga.loading import CONNECTORS, load_tools
from agentsaga.settings import Settings
from agentsaga.settle_report import SettleReport
from agentsaga.settlement import reconcile_run, unwind_run


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


configure_reconcile = _configure
configure_unwind = _configure


def _settle(args: argparse.Namespace, action: str) -> int:
    settings = Settings.from_env()
    telemetry.setup(f"agentsaga-{action}")  # spans continue the run's trace (OTEL_* env)
    modules = args.tools or list(settings.tools) or [CONNECTORS]
    try:
        registry = load_tools(modules)
    except ConfigurationError as exc:
        if args.tools or settings.tools:
            raise
        raise ConfigurationError(
            f"{action} needs the run's tools to look its steps up by key: pass --tools MODULE "
            "(the sidecar's AGENTSAGA_TOOLS; a module name or a file such as ./mytools.py). "
            f"Tried the default: {exc}") from None
    owner = args.owner or f"{action}:{socket.gethostname()}:{os.getpid()}"
    saga_log = open_log_from(args, hooks=telemetry.TelemetryHooks())
    try:
        fn = reconcile_run if action == "reconcile" else unwind_run
        report: SettleReport = fn(saga_log, registry, args.run, owner,
                                  recheck_pause_s=settings.recheck_pause_s)
    finally:
        saga_log.close()
        telemetry.shutdown()  # flush before the Job's container exits
    print(json.dumps(report.to_json(), indent=2, default=str) if args.json else render(report))
    return exit_code(report)


NEEDS_HUMAN_EXIT = 3
"""The exit code of a reconcile or unwind after which only a person can go on."""


def exit_code(report: SettleReport) -> int:
    if report.needs_human:
        return NEEDS_HUMAN_EXIT
    return 0 if report.settled else 1


def render(report: SettleReport) -> str:
    """The report as a person reads it: what was found, compensated, queued, left."""
    done = "settled" if report.settled else "NOT settled"
    if report.needs_human:
        done += f", WAITING FOR A PERSON ({len(report.waiting)})"
    lines = [f"{report.action} of run {report.run_id} (epoch {report.epoch}): {done}"]
    sections = [("found by key", report.reconciled), ("compensated", report.compensated),
                ("queued as corrections", report.queued),
                ("compensation failed (needs a human)", report.failed),
                ("compensation outcome unknown (run unwind again)", report.pending),
                ("still unknown", report.unsettled),
                ("corrections (internal first)", report.corrections)]
    for title, items in sections:
        if items:
            lines.append(f"  {title}:")
            lines += [f"    {_line(item)}" for item in items]
    if report.waiting:
        lines.append("  waiting for a person (the run is not done until each is settled):")
        lines += [f"    step {w['step_idx']} {w['tool']}: {w['what']}; run: {w['command']}"
                  for w in report.waiting]
    return "\n".join(lines)


def _line(item: dict[str, Any]) -> str:
    head = f"step {item.get('step_idx')} {item.get('tool')}"
    rest = ", ".join(f"{k}={v}" for k, v in item.items() if k not in ("step_idx", "tool"))
    return f"{head}: {rest}" if rest else head


def run_reconcile(args: argparse.Namespace) -> int:
    return _settle(args, "reconcile")


def run_unwind(args: argparse.Namespace) -> int:
    return _settle(args, "unwind")
