"""A step no lookup can settle (NO_LOOKUP, outcome unknown) on real Postgres, a real sidecar over
gRPC and MCP, and the real CLI: the agent is told NEEDS_HUMAN (not "call again"), `agentsaga
unwind` refuses to report the run done and names the command, `agentsaga settle` records the
person's word once, and the unwind then finishes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import mcp_types as types
import psycopg
import pytest

from agentsaga.cli.job_commands import NEEDS_HUMAN_EXIT
from agentsaga.client import SYSTEM_PROMPT, ToolNeedsHuman
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.store import SagaLog
from agentsaga.store.interfaces import OperatorStore
from sagatest import ledger_tools
from sagatest.ledger_tools import add_fault, calls, effects
from sagatest.mcp_fixtures import ROOT, MCPSidecar, run
from sagatest.sidecar_fixtures import SidecarProcess

RUN = "sms-1182"
TICKET = {"summary": "Refund for order 1182", "order_id": "1182"}
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}
TOOLS = "sagatest.ledger_tools"


@pytest.fixture
def service(pg: str, ledger: str) -> Iterator[SagaService]:
    saga_log = SagaLog(pg, min_size=1, max_size=4).open()
    out = SagaService(saga_log, ledger_tools.build_registry(), Settings(recheck_pause_s=0.01),
                      sleep=lambda _: None)
    yield out
    saga_log.close()


def cli(pg: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentsaga.cli", *args, "--dsn", pg],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def settlement_rows(pg: str) -> list[tuple[int, str, str | None, str | None]]:
    with psycopg.connect(pg) as conn:
        return conn.execute("SELECT step_idx, state, outcome, settler FROM step_settlements"
                            " ORDER BY step_idx").fetchall()


def email_sent_unknown(service: SagaService, ledger: str, operator_log: OperatorStore) -> None:
    """A ticket, then an email (irreversible, no lookup) whose answer is lost after it went out."""
    service.begin_run(RUN)
    operator_log.set_policy(RUN, {"irreversibleBeforePivot": "count"})  # the operator copies it
    assert service.dispatch(RUN, "create_ticket", TICKET).outcome == "CONFIRMED"
    add_fault(ledger, "send_email", "unknown_after_commit")
    out = service.dispatch(RUN, "send_email", EMAIL)
    assert out.outcome == "NEEDS_HUMAN", out
    assert out.step_idx == 1
    assert f"agentsaga settle --run {RUN} --step 1" in out.message
    assert "end your turn" in out.message


def test_the_agent_is_told_to_stop_and_a_person_settles_the_step(
        service: SagaService, ledger: str, pg: str, operator_log: OperatorStore) -> None:
    email_sent_unknown(service, ledger, operator_log)
    assert settlement_rows(pg) == [(1, "Waiting", None, None)]
    # calling again (or another tool) changes nothing and calls nothing
    again = service.dispatch(RUN, "send_email", EMAIL)
    other = service.dispatch(RUN, "create_draft", {"body": "a draft"})
    assert (again.outcome, other.outcome) == ("NEEDS_HUMAN", "NEEDS_HUMAN")
    assert other.step_idx == 1
    assert len(calls(ledger, "send_email")) == 1 and calls(ledger, "create_draft") == []

    before = cli(pg, "unwind", "--run", RUN, "--tools", TOOLS)
    assert before.returncode == NEEDS_HUMAN_EXIT, before.stdout + before.stderr
    assert "WAITING FOR A PERSON" in before.stdout
    assert f"step 1 send_email: step outcome unknown, no lookup can settle it; run: " \
           f"agentsaga settle --run {RUN} --step 1" in before.stdout

    wrong_key = cli(pg, "settle", "--run", RUN, "--step", "1", "--happened", "--reason", "x",
                    "--key", "0" * 32)
    assert wrong_key.returncode == 2 and "not '00000000" in wrong_key.stderr
    no_step = cli(pg, "settle", "--run", RUN, "--step", "9", "--not-happened", "--reason", "x")
    assert no_step.returncode == 2 and "has no step 9" in no_step.stderr
    assert settlement_rows(pg) == [(1, "Waiting", None, None)]

    [email] = effects(ledger, "email")
    settled = cli(pg, "settle", "--run", RUN, "--step", "1", "--happened", "--ref",
                  f"EMAIL-{email['id']}", "--reason", "the customer forwarded it", "--by",
                  "alice")
    assert settled.returncode == 0, settled.stderr
    assert "settled as Happened by alice; the step is CONFIRMED" in settled.stdout
    assert settlement_rows(pg) == [(1, "Settled", "Happened", "alice")]
    step = service.saga_log.step(RUN, 1)
    assert step is not None and step.status == "CONFIRMED"
    assert step.external_ref == f"EMAIL-{email['id']}"

    same = cli(pg, "settle", "--run", RUN, "--step", "1", "--happened", "--reason", "again",
               "--by", "bob")
    assert same.returncode == 0 and "was settled before (nothing changed)" in same.stdout
    other_word = cli(pg, "settle", "--run", RUN, "--step", "1", "--not-happened", "--reason",
                     "no", "--by", "bob")
    assert other_word.returncode == 2
    assert "settled before as Happened by alice" in other_word.stderr
    assert settlement_rows(pg) == [(1, "Settled", "Happened", "alice")]

    unwound = cli(pg, "unwind", "--run", RUN, "--tools", TOOLS)
    # the ticket is closed; the email, seen by the customer, waits as a proposed correction
    assert unwound.returncode == NEEDS_HUMAN_EXIT, unwound.stdout + unwound.stderr
    assert f"agentsaga corrections --run {RUN} --approve 1" in unwound.stdout
    assert [t["closed"] for t in effects(ledger, "ticket")] == [True]
    assert service.saga_log.require_run(RUN).state == "unwound"
    dismissed = cli(pg, "corrections", "--run", RUN, "--dismiss", "1", "--reason", "apologised")
    assert dismissed.returncode == 0, dismissed.stderr
    done = cli(pg, "unwind", "--run", RUN, "--tools", TOOLS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_step_settled_as_not_happened_runs_again_under_its_key(
        service: SagaService, ledger: str, pg: str, operator_log: OperatorStore) -> None:
    email_sent_unknown(service, ledger, operator_log)
    with psycopg.connect(pg, autocommit=True) as conn:  # the email never left, in truth
        conn.execute("DELETE FROM ledger WHERE kind = 'email'")
    settled = cli(pg, "settle", "--run", RUN, "--step", "1", "--not-happened", "--reason",
                  "not in the provider's log", "--settler", "carol")
    assert settled.returncode == 0, settled.stderr
    again = service.dispatch(RUN, "send_email", EMAIL)
    assert again.outcome == "CONFIRMED" and again.step_idx == 1
    [email] = effects(ledger, "email")
    assert email["key"] == again.key


def test_settling_a_step_that_is_not_unknown_is_refused(service: SagaService,
                                                        pg: str) -> None:
    service.begin_run(RUN)
    service.dispatch(RUN, "create_ticket", TICKET)
    refused = cli(pg, "settle", "--run", RUN, "--step", "0", "--not-happened", "--reason", "x")
    assert refused.returncode == 2
    assert "is CONFIRMED, not UNKNOWN" in refused.stderr
    assert settlement_rows(pg) == []


def test_the_grpc_client_raises_tool_needs_human(
        ledger: str, sidecar_factory: Callable[..., SidecarProcess]) -> None:
    sidecar = sidecar_factory(ledger, TOOLS, env={"LEDGER_DSN": ledger,
                                                  "AGENTSAGA_IRREVERSIBLE_BEFORE_PIVOT": "count"})
    client = sidecar.client()
    client.begin_run(RUN)
    add_fault(ledger, "send_email", "unknown_after_commit")
    with pytest.raises(ToolNeedsHuman) as raised:
        client.dispatch(RUN, "send_email", EMAIL)
    assert raised.value.step_idx == 0
    assert "do not call send_email again" in str(raised.value).lower()
    assert "NEEDS HUMAN: only a person" in SYSTEM_PROMPT


def test_mcp_answers_needs_human_with_the_prompt_line(
        pg: str, ledger: str, tmp_path: Path,
        mcp_sidecar_factory: Callable[..., MCPSidecar]) -> None:
    no_upstreams = tmp_path / "upstreams.yaml"
    no_upstreams.write_text("upstreams: {}\n")
    sidecar = mcp_sidecar_factory(pg, no_upstreams, tools=TOOLS, env={
        "LEDGER_DSN": ledger, "AGENTSAGA_IRREVERSIBLE_BEFORE_PIVOT": "count"})
    add_fault(ledger, "send_email", "unknown_after_commit")

    async def call() -> types.CallToolResult:
        async with sidecar.client(RUN) as client:
            return await client.call_tool("send_email", EMAIL)

    result = run(call())
    assert result.is_error and result.meta is not None
    assert result.meta["agentsaga.io/outcome"] == "NEEDS_HUMAN"
    text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
    assert text.startswith("NEEDS HUMAN: only a person can find out whether that call happened")
    assert f"agentsaga settle --run {RUN} --step 0" in text
