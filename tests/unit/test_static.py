"""The project's own checks: lint, types, generated code in sync, the public API pinned."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import agentsaga

ROOT = Path(__file__).resolve().parents[2]


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_is_clean() -> None:
    result = run(sys.executable, "-m", "ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = run(sys.executable, "tools/typecheck.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_grpc_code_matches_the_protos() -> None:
    result = run(sys.executable, "tools/gen_protos.py", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_public_api_is_pinned() -> None:
    # added on purpose: the error tree's new branches (DecisionError, CorrectionError,
    # LogUnavailable), the two refusals agents meet (PermissionDenied, RateLimited) and the
    # code each error declares for a front end (ErrorCode); a settlement a person cannot
    # record (SettlementError) and the agent's "only a person can settle this" (ToolNeedsHuman);
    # what reconcile hands a lookup that needs more than the key (LookupContext); a tool's
    # time contract (TimeContract, for `timing=`) and a run asked to succeed over an unknown
    # step (RunUnsettled)
    assert sorted(agentsaga.__all__) == sorted([
        "NO_LOOKUP", "TOOL_CLASSES", "Compensation", "CompensationUnavailable",
        "ConfigurationError", "CorrectionError", "DatabaseUnavailable", "DecisionError",
        "Effect", "ErrorCode", "Fenced", "InvalidArguments", "InvalidRunId", "LogUnavailable",
        "LookupContext",
        "OutcomeUnknown", "PermissionDenied", "PivotError", "RateLimited", "Registry",
        "RegistrationError", "Rejected",
        "RequestError", "RunEnded", "RunNotFound", "RunUnsettled", "SagaError",
        "SettlementError", "TimeContract", "ToolError",
        "ToolNeedsHuman", "ToolSpec",
        "UnknownTool", "compensation_key", "default_registry", "ref", "register", "step_key",
        "tool",
    ])
    for name in agentsaga.__all__:
        assert hasattr(agentsaga, name), name


def test_help_lists_every_command_and_each_command_explains_itself() -> None:
    result = run(sys.executable, "-m", "agentsaga.cli", "--help")
    assert result.returncode == 0, result.stderr
    from agentsaga.cli import COMMANDS, build_parser

    for name in COMMANDS:
        assert name in result.stdout
        parser = build_parser(only=name)
        action = parser._subparsers._group_actions[0]  # type: ignore[union-attr]
        assert isinstance(action, argparse._SubParsersAction)
        subparsers = action.choices
        assert subparsers[name].format_help().startswith(f"usage: agentsaga {name}")
