"""A person's input names its person; the CLI asks the login name only then (the chart's images
run as uid 65532, which has no name: tests/integration/test_chart_images.py runs them)."""

from __future__ import annotations

import getpass

import pytest

from agentsaga.cli import build_parser
from agentsaga.cli.commands import _person
from agentsaga.errors import ConfigurationError


def _nameless() -> str:
    raise OSError("No username set in the environment")


def test_the_parsers_ask_no_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(getpass, "getuser", _nameless)
    args = build_parser("settle").parse_args(["settle", "--run", "r", "--step", "0",
                                      "--not-happened", "--reason", "seen in the ledger"])
    assert args.settler is None


def test_a_decision_without_a_name_says_how_to_give_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert _person("dana", "--approver") == "dana"
    monkeypatch.setattr(getpass, "getuser", _nameless)
    with pytest.raises(ConfigurationError, match="say who decides with --settler NAME"):
        _person(None, "--settler")
