"""A person's input names its person; the CLI looks the login name up only then: the chart's
images run as uid 65532, which has no passwd entry, and every Job built from the sidecar's
container runs the CLI there."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys

import pytest

from agentsaga.cli.commands import _person

NAMELESS = 65532


def _nameless_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("LOGNAME", "USER", "LNAME", "USERNAME")}


def test_the_cli_starts_as_a_uid_without_a_name() -> None:
    with pytest.raises(KeyError):
        pwd.getpwuid(NAMELESS)
    assert os.geteuid() == 0, "this test runs the CLI as uid 65532: run the tests as root"
    done = subprocess.run(
        [sys.executable, "-P", "-m", "agentsaga.cli", "corrections", "--help"],
        capture_output=True, text=True, env=_nameless_env(), timeout=120, check=False,
        user=NAMELESS, cwd="/")
    assert done.returncode == 0, done.stderr
    assert "--approver" in done.stdout


def test_a_decision_without_a_name_says_how_to_give_one() -> None:
    assert _person("dana", "--approver") == "dana"
    done = subprocess.run(
        [sys.executable, "-P", "-c",
         "from agentsaga.cli.commands import _person; _person(None, '--settler')"],
        capture_output=True, text=True, env=_nameless_env(), timeout=120, check=False,
        user=NAMELESS, cwd="/")
    assert done.returncode == 1
    assert "ConfigurationError" in done.stderr and "--settler NAME" in done.stderr
