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


def page(results: dict[str, Any], latency: list[Row], summary: list[str]) -> str:
    """The Markdown page for `results` (what `agentsaga bench --json` prints), its latency rows
    and the summary lines under them, as the bench renders them."""
    facts = results.get("run") or {}
    lines = [
        "# Benchmark figures",
        "",
        "<!-- written by `agentsaga bench --write-docs`: regenerate it, do not edit it -->",
        "",
        "These figures are one run of `agentsaga bench`, written to this page by the bench "
        "itself. To regenerate the page from a checkout (with `make test`'s environment):",
        "",
        "```",
        ".venv/bin/agentsaga bench --quick --write-docs docs/benchmarks/figures.md",
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
                       ("load average at the start", "load_average"), ("Python", "python"),
                       ("platform", "platform")):
        value = facts.get(key)
        lines.append(f"| {label} | {'not recorded' if value is None else _cell(str(value))} |")
    lines += [
        "",
        "Absolute numbers move with the machine and its load; compare rows within one run.",
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


def write(path: Path, results: dict[str, Any], latency: list[Row], summary: list[str]) -> None:
    """The page at `path` and the run's results beside it (`path` with `.json`), from which the
    page can be written again (`--from-json`) and checked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(results, latency, summary))
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
