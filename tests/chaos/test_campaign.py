"""The chaos campaign: a short one in CI holds every invariant, leaks no secret or card number,
and a broken invariant is caught."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from agentsaga.redact import redact_text
from agentsaga_lab.chaos import Answer, Campaign, CampaignConfig, check
from agentsaga_lab.chaos.scan import HOSTILE_KEY, hostile_body, scan
from sagatest.sidecar_fixtures import ROOT

SECRET = "sk_test_PLANTED_9f3b1c7e5d"
CARD_FORMS = ("4242 4242 4242 4242", "4242424242424242", "4242-4242-4242-4242")


def test_short_campaign_holds_every_invariant_and_prints_the_summary_last() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "chaos", "--runs", "12", "--seed", "7"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "AGENTSAGA_STRIPE_API_KEY": SECRET})
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith("runs: 12, faults: ") and lines[-1].endswith(", violations: 0"), \
        done.stdout + done.stderr
    assert int(lines[-1].split("faults: ")[1].split(",")[0]) >= 12
    assert done.returncode == 0
    assert "violations: none" in done.stdout
    for leak in (SECRET, *CARD_FORMS):
        assert leak not in done.stdout + done.stderr


def _dump(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT saga_runs::text FROM saga_runs UNION ALL"
                            " SELECT saga_log::text FROM saga_log").fetchall()
    return "\n".join(r[0] for r in rows)


def test_campaign_output_and_saga_log_hold_no_secret_and_no_card_number(pg: str) -> None:
    """A whole campaign whose real systems turn hostile twice (seed 9: a Jira and a Stripe call
    refused with an error quoting card numbers, the caller's own `Bearer` key and another API
    key): its hostile-output scan (`agentsaga_lab.chaos.scan`: every process's output, every answer
    the agent read, every table) finds none of them in clear."""
    seen: list[str] = []
    result = Campaign(CampaignConfig(seed=9, runs=5, dsn=pg, stripe_key=SECRET),
                      say=seen.append).run()
    assert result.faults["world:hostile_reject"] == 2, result.faults
    assert result.violations == []
    stored = _dump(pg)
    assert "[card ****4242]" in stored  # the charges' arguments were stored, masked
    everything = "\n".join([*seen, result.output.text(), stored])
    for leak in (SECRET, *CARD_FORMS):
        assert leak not in everything


def test_the_hostile_output_scan_finds_a_card_or_a_key_in_clear_even_in_part() -> None:
    outputs = {"clean": f"card [card ****4242], Bearer [redacted], {HOSTILE_KEY[:8]}",
               "a card": "charged 4242-4242-4242-4242", "a key cut": SECRET[-12:],
               "another card": "tried 5555 5555 5555 4444"}
    found = {v.detail for v in scan(outputs, [SECRET])}
    assert found == {"a card holds card ****4242 in clear",
                     f"a key cut holds secret {SECRET[:8]}… in clear",
                     "another card holds card ****4444 in clear"}
    assert "Bearer [redacted]" in redact_text(str(hostile_body(SECRET)))
    assert scan({"masked": redact_text(str(hostile_body(SECRET)))}, [SECRET]) == []


def _truth(**extra: Any) -> dict[str, Any]:
    return {"payment_intents": [], "refunds": [], "tickets": [], "emails": [], "reships": [],
            **extra}


RUN = {"run_id": "r", "state": "succeeded", "ended_at": "now", "pivot": None}


def _row(**over: Any) -> dict[str, Any]:
    return {"run_id": "r", "step_idx": 0, "tool": "charge_card", "tool_class": "compensatable",
            "idempotency_key": "k0", "status": "CONFIRMED", "after_pivot": False,
            "comp_status": None, **over}


def _pi(pid: str, key: str, status: str = "requires_capture") -> dict[str, Any]:
    return {"id": pid, "status": status, "metadata": {"saga_key": key}}


@pytest.mark.parametrize(("broken", "runs", "rows", "truth", "answers"), [
    ("at_most_once", [RUN], [_row()], _truth(payment_intents=[_pi("pi_1", "k0"),
                                                              _pi("pi_2", "k0")]), []),
    ("intent_first", [RUN], [], _truth(payment_intents=[_pi("pi_1", "k9")]), []),
    ("outcome_matches", [RUN], [_row(status="NOT_EXECUTED")],
     _truth(payment_intents=[_pi("pi_1", "k0")]), []),
    ("no_phantom_undo", [RUN], [_row(status="COMPENSATED")], _truth(), []),
    ("compensated_once", [RUN], [_row(status="COMPENSATED")],
     _truth(payment_intents=[_pi("pi_1", "k0", "canceled")],
            refunds=[{"id": "re_1", "payment_intent": "pi_1"}]), []),
    ("compensated_once", [{**RUN, "state": "unwound"}], [_row()],
     _truth(payment_intents=[_pi("pi_1", "k0")]), []),
    ("approved_messages", [RUN], [_row(tool="send_email", tool_class="irreversible")],
     _truth(emails=[{"id": "e1", "idempotency_key": "k0", "to": ["c@x"]}]), []),
    ("settled", [RUN], [_row(status="UNKNOWN")], _truth(), []),
    ("settled", [{**RUN, "ended_at": None}], [], _truth(), []),
    ("no_row_lost", [RUN], [], _truth(), [Answer("r", 0, "k0", "CONFIRMED")]),
])
def test_a_broken_invariant_is_reported(broken: str, runs: list[dict[str, Any]],
                                        rows: list[dict[str, Any]], truth: dict[str, Any],
                                        answers: list[Answer]) -> None:
    found = check(runs, rows, truth, answers)
    assert broken in {v.invariant for v in found}, found


def test_a_healthy_ground_truth_has_no_violation() -> None:
    rows = [_row(), _row(step_idx=1, tool="create_ticket", idempotency_key="k1",
                         status="COMPENSATED")]
    truth = _truth(payment_intents=[_pi("pi_1", "k0")], tickets=[
        {"system": "zendesk", "id": 1, "external_id": "k1", "state": "closed",
         "comments": [{"body": "Rolled back: the agent run that created this was unwound"}]}])
    assert check([RUN], rows, truth, [Answer("r", 0, "k0", "CONFIRMED")]) == []


@pytest.mark.parametrize(("args", "says"), [
    (["--runs", "0"], "argument --runs: must be a whole number of at least 1, got '0'"),
    (["--runs", "-3"], "argument --runs: must be a whole number of at least 1, got '-3'"),
    (["--runs", "many"], "argument --runs: must be a whole number of at least 1, got 'many'"),
    (["--only-run", "-1"], "argument --only-run: must be a whole number of at least 0, got '-1'"),
])
def test_a_campaign_that_would_check_nothing_is_refused(args: list[str], says: str) -> None:
    """`--runs 0` would report a pass after checking nothing."""
    done = subprocess.run([sys.executable, "-m", "agentsaga.cli", "chaos", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2, done.stdout
    assert says in done.stderr, done.stderr
    assert "violations" not in done.stdout and "runs:" not in done.stdout


def test_a_campaign_on_a_dsn_waits_as_long_as_db_wait_says() -> None:
    unreachable = "postgresql://agentsaga@127.0.0.1:9/nothing"
    done = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "chaos", "--runs", "1", "--dsn", unreachable],
        capture_output=True, text=True, cwd=ROOT, timeout=25,
        env={**os.environ, "AGENTSAGA_DB_WAIT_S": "1"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot reach the saga log's Postgres at 127.0.0.1:9/nothing after 1s" in done.stderr
