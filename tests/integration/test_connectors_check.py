"""`agentsaga connectors check` against the world: it passes on the default accounts, reports
each account that lacks what its connector relies on (the world's knobs break them on purpose),
and creates nothing (the world's ground truth and its log of calls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agentsaga.cli import main
from agentsaga_lab.demo.world import connector_env
from agentsaga_lab.world import World
from sagatest.contracts.openapi import Contract
from sagatest.sidecar_fixtures import ROOT

CONTRACTS = {"/v1/": Contract.load("stripe"), "/rest/api/3/": Contract.load("jira"),
             "/api/v2/": Contract.load("zendesk"), "/emails": Contract.load("resend")}
EMPTY: dict[str, list[object]] = {"payment_intents": [], "refunds": [], "tickets": [],
                                  "emails": [], "drafts": []}


@pytest.fixture
def env(world: World, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    settings = {**connector_env(world.url), "AGENTSAGA_ZENDESK_URL": world.url,
                "AGENTSAGA_ZENDESK_EMAIL": "agent@shop.example",
                "AGENTSAGA_ZENDESK_TOKEN": "token"}
    settings.pop("AGENTSAGA_WAREHOUSE_URL")
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    return settings


def check(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[tuple[str, str], dict[str, str]]]:
    code = main(["connectors", "check", "--json"])
    rows = json.loads(capsys.readouterr().out)
    return code, {(r["system"], r["check"]): r for r in rows}


def assert_nothing_created(world: World) -> None:
    truth = world.truth()
    assert {k: truth[k] for k in EMPTY} == EMPTY
    writes = [c for c in truth["calls"] if not c.startswith("GET ")]
    assert writes == ["POST /rest/api/3/search/jql"]  # a search: read-only
    for exchange in world.exchanges():  # every request it sent is in the vendor's API
        contract = next(c for prefix, c in CONTRACTS.items() if exchange.path.startswith(prefix))
        op = contract.operation(exchange.method, exchange.path)
        assert op is not None and contract.check_request(op, exchange) == [], exchange.path
        if exchange.status < 400:  # (Resend documents no error answers)
            assert contract.check_response(op, exchange) == [], exchange.path


def test_passes_on_accounts_set_up_as_the_connectors_need(
        world: World, env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-P", "-m", "agentsaga.cli", "connectors", "check"],
                          env={**os.environ, **env}, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("ok  ") for line in lines) == 10
    assert "10/10 checks passed; email, jira, stripe, zendesk ready" in lines
    assert_nothing_created(world)


@pytest.mark.parametrize(("knob", "failed", "words"), [
    ("stripe_search", ("stripe", "search"), "Search API is not usable"),
    ("jira_done_transition", ("jira", "done"), "no status in the Done category"),
    ("jira_labels", ("jira", "labels"), "has no Labels field"),
    ("zendesk_agent", ("zendesk", "authentication"), "is an end-user"),
    ("zendesk_token_access", ("zendesk", "authentication"), "enable API token access"),
    ("email_full_access", ("email", "lookup"), "not a sending-only key"),
])
def test_reports_the_account_that_lacks_what_its_connector_needs(
        world: World, env: dict[str, str], capsys: pytest.CaptureFixture[str], knob: str,
        failed: tuple[str, str], words: str) -> None:
    setattr(world.accounts, knob, False)
    code, rows = check(capsys)
    assert code == 1
    assert words in rows[failed]["detail"] and not rows[failed]["ok"]
    others = {k for k, r in rows.items() if not r["ok"]} - {failed}
    assert others <= {("zendesk", "lookup")}  # an end user cannot list tickets either
    assert_nothing_created(world)


def test_a_missing_jira_project_is_reported_and_its_dependent_checks_skipped(
        world: World, env: dict[str, str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSAGA_JIRA_PROJECT", "OPS")
    code, rows = check(capsys)
    assert code == 1
    assert "project 'OPS' is not visible" in rows[("jira", "project")]["detail"]
    assert "No project could be found with key 'OPS'" in rows[("jira", "project")]["detail"]
    assert rows[("jira", "labels")]["detail"] == "skipped: the project check failed"
    assert [k for k, r in rows.items() if not r["ok"]] == [
        ("jira", "project"), ("jira", "labels"), ("jira", "done")]
    world.accounts.jira_projects = ("SUP", "OPS")
    assert check(capsys)[0] == 0


def test_no_configured_connector_is_a_configuration_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in list(os.environ):
        if name.startswith("AGENTSAGA_"):
            monkeypatch.delenv(name)
    assert main(["connectors", "check"]) == 2
    assert "no connector is configured" in capsys.readouterr().err
