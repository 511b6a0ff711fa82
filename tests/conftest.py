"""Shared fixtures: each family lives in its own module of `sagatest` (tests/support), named for
what it yields."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentsaga import grpc_tuning

# this process's clients and in-process sidecars run gRPC as the processes `agentsaga` starts
# do: set before the fixture modules below import grpc (its core reads it then, once)
grpc_tuning.apply()

SUPPORT = Path(__file__).resolve().parent / "support"
TALLY = "tally: "
"""A `record_property` name starting so is summed over the session and printed at its end."""

pytest_plugins = ["sagatest.pg_fixtures", "sagatest.sidecar_fixtures", "sagatest.world_fixtures",
                  "sagatest.operator_fixtures", "sagatest.operator_log",
                  "sagatest.ledger_fixtures",
                  "sagatest.otlp_collector", "sagatest.mcp_fixtures",
                  "sagatest.prometheus_fixtures", "sagatest.log_checks",
                  "sagatest.outcome_modes", "sagatest.traced",
                  "sagatest.cluster.fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    """The processes the tests start (sidecars, Jobs, the operator) import the helpers the way
    this one does: from tests/support, and never from their working directory (PYTHONSAFEPATH
    keeps `python -m` from putting the repository root first on sys.path)."""
    paths = [str(SUPPORT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ["PYTHONSAFEPATH"] = "1"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    """The order is random (pytest-randomly): say how to replay it, even under -q."""
    tallies: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":  # the teardown's repeats them
                continue
            for name, value in getattr(report, "user_properties", ()):
                if isinstance(name, str) and name.startswith(TALLY):
                    tallies[name[len(TALLY):]] = tallies.get(name[len(TALLY):], 0) + int(value)
    for name, total in sorted(tallies.items()):  # counts the tests record (record_property)
        terminalreporter.write_line(f"{name}: {total}")
    seed = getattr(config.option, "randomly_seed", None)
    if config.pluginmanager.hasplugin("randomly") and isinstance(seed, int):
        terminalreporter.write_line(f"random test order: replay it with "
                                    f"--randomly-seed={seed}")
