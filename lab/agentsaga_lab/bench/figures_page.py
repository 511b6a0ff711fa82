"""The documentation's benchmark figures page, written from one run's results.

    agentsaga bench --quick --write-docs docs/benchmarks/figures.md
    agentsaga bench --json > run.json; agentsaga bench --from-json run.json --write-docs PAGE

The page holds only what the run measured (the same rows `agentsaga bench` prints) and where it
ran; nothing on it is typed by hand, so it is regenerated, never edited.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def run_facts(argv: list[str]) -> dict[str, Any]:
    """Where and how a run was made: kept in its results (`run`), printed on the page."""
    return {
        "command": " ".join(["agentsaga", "bench", *argv]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 1),
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
    }


Row = tuple[str, str, str, str]
"""A latency row as `agentsaga bench` prints it: label, p50 (ms), p99 (ms), note."""

RatioRow = tuple[str, str, str]
"""A ratio row as `agentsaga bench` prints it: what, the ratio, to what."""


def representative(facts: dict[str, Any]) -> bool:
    """Whether a run's figures describe the machine rather than its neighbours: as the run
    recorded it (`machine_load`), else (a run saved before that was recorded) whether the load
    at its start was within the core count."""
    if "representative" in facts:
        return bool(facts["representative"])
    load, cpus = facts.get("load_average"), facts.get("cpus")
    return load is None or cpus is None or load <= cpus


def _warning(facts: dict[str, Any]) -> list[str]:
    if representative(facts):
        return []
    during = facts.get("others_load_most")
    return [
        "!!! warning \"Not representative\"",
        f"    These figures were taken on a loaded machine (1-minute load "
        f"{facts.get('load_average', '?')} at the start on {facts.get('cpus', '?')} cores"
        + ("" if during is None else f", others' load up to {during} during the run")
        + "): other work was measured with ours. Regenerate the page on a quiet machine.",
        "",
    ]


def page(results: dict[str, Any], latency: list[Row], summary: list[str],
         ratios: list[RatioRow] | None = None) -> str:
    """The Markdown page for `results` (what `agentsaga bench --json` prints): its ratios
    first (to the floors of the same run, to the peers), then the latency rows in
    milliseconds and the summary lines under them, as the bench renders them."""
    facts = results.get("run") or {}
    lines = [
        "# Benchmark figures",
        "",
        "<!-- written by `agentsaga bench --write-docs`: regenerate it, do not edit it -->",
        "",
        *_warning(facts),
        "These figures are one run of `agentsaga bench`, written to this page by the bench "
        "itself, which refuses to when the machine is loaded. To regenerate the page and the "
        "regression gate's baseline from a checkout (with `make test`'s environment), on a "
        "quiet machine:",
        "",
        "```",
        ".venv/bin/agentsaga bench --quick --write-docs docs/benchmarks/figures.md --json "
        "> bench/baseline.json",
        "```",
        "",
        "The run's results are beside it, [figures.json](figures.json); `--from-json FILE` "
        "writes the page from such a file instead of measuring again. What each row measures, "
        "and how to read it, is on [How the benchmark works](index.md).",
        "",
        "## The run",
        "",
        "| | |",
        "|---|---|",
    ]
    for label, key in (("command", "command"), ("when", "date"), ("CPUs", "cpus"),
                       ("load average at the start", "load_average"),
                       ("highest load average during the run", "load_most"),
                       ("others' load during the run, at most", "others_load_most"),
                       ("Python", "python"), ("platform", "platform")):
        value = facts.get(key)
        lines.append(f"| {label} | {'not recorded' if value is None else _cell(str(value))} |")
    lines.append(f"| representative | {'yes' if representative(facts) else 'no'} |")
    lines += [
        "",
        "Absolute numbers move with the machine and its load; the ratios below hold better, "
        "and rows compare only within one run.",
        "",
        "## Ratios",
        "",
        "Each figure against the floors measured in the same run, what isolation costs, and "
        "each peer against ours (above 1: the peer is slower).",
        "",
        "| what | ratio | to |",
        "|---|---:|---|",
    ]
    lines += [f"| {_cell(a)} | {b} | {_cell(c)} |" for a, b, c in ratios or []]
    lines += [
        "",
        "## Latency",
        "",
        "| what | p50 (ms) | p99 (ms) | note |",
        "|---|---:|---:|---|",
    ]
    lines += [f"| {_cell(a)} | {b} | {c} | {_cell(d)} |" for a, b, c, d in latency]
    lines += ["", "## Throughput, memory, reconcile, scale", ""]
    lines += _bullets(summary)
    return "\n".join(lines) + "\n"


def write(path: Path, results: dict[str, Any], latency: list[Row], summary: list[str],
          ratios: list[RatioRow] | None = None) -> None:
    """The page at `path` and the run's results beside it (`path` with `.json`), from which the
    page can be written again (`--from-json`) and checked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(results, latency, summary, ratios))
    path.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"bench: wrote {path} and {path.with_suffix('.json').name}", file=sys.stderr)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _bullets(summary: list[str]) -> list[str]:
    """The summary lines as a list; an indented line belongs to the one above it."""
    out: list[str] = []
    for line in summary:
        if line.startswith("  "):
            out.append(f"    - {line.strip()}")
        else:
            out.append(f"- {line}")
    return out
