"""R6 with compensations that can run: a call whose compensation names a tool that is not
registered is refused before its intent (nothing written, nothing called), and an irreversible
tool without `compensate=` gets a Proposed correction a person writes, never "no tool named
'None'". Real Postgres, the real CLI."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from agentsaga import Compensation, CompensationUnavailable, Registry
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.store import SagaLog
from sagatest import ledger_tools
from sagatest.mcp_fixtures import ROOT


def step_rows(pg: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(pg) as conn:
        return conn.execute("SELECT step_idx, tool, status FROM saga_log ORDER BY step_idx"
                            ).fetchall()


@pytest.fixture
def saga_log(pg: str) -> Iterator[SagaLog]:
    with SagaLog(pg, min_size=1, max_size=4).open() as log:
        yield log


def test_a_compensation_naming_an_unregistered_tool_is_refused_before_the_intent(
        saga_log: SagaLog, pg: str) -> None:
    registry = Registry()
    sent: list[str] = []

    @registry.tool(cls="compensatable", audience=["finance"], lookup=lambda key: None,
                   compensate=lambda args, key: Compensation("refund_charge", {"key": key}))
    def charge(amount: int, idempotency_key: str) -> dict[str, str]:
        sent.append(idempotency_key)
        return {"id": "ch_1"}

    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01))
    service.begin_run("comp-1")
    with pytest.raises(CompensationUnavailable) as refused:
        service.dispatch("comp-1", "charge", {"amount": 500})
    assert "names the tool 'refund_charge', which is not registered" in str(refused.value)
    assert sent == [] and step_rows(pg) == []


def test_an_irreversible_tool_without_a_correction_waits_for_a_person_who_writes_it(
        saga_log: SagaLog, ledger: str, pg: str) -> None:
    service = SagaService(saga_log, ledger_tools.build_registry(),
                          Settings(recheck_pause_s=0.01))
    service.begin_run("comp-2")
    saga_log.set_policy("comp-2", {"irreversibleBeforePivot": "count"})  # as the operator copies it
    assert service.dispatch("comp-2", "refund", {"charge_key": "k1"}).outcome == "CONFIRMED"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agentsaga.cli", *args, "--dsn", pg],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)

    unwound = cli("unwind", "--run", "comp-2", "--tools", "sagatest.ledger_tools")
    assert unwound.returncode == 3, unwound.stdout + unwound.stderr
    [proposed] = saga_log.corrections("comp-2")
    assert (proposed.state, proposed.correction) == ("Proposed", None)

    approve = cli("corrections", "--run", "comp-2", "--approve", "0")
    assert approve.returncode == 2
    assert "'refund' declares no compensate=, which for an irreversible tool is its " \
           "correction. A person writes and sends it" in approve.stderr
    sent = cli("corrections", "--run", "comp-2", "--send", "--tools", "sagatest.ledger_tools")
    assert "None" not in sent.stdout + sent.stderr
    dismissed = cli("corrections", "--run", "comp-2", "--dismiss", "0", "--reason",
                    "sent by hand: email to finance")
    assert dismissed.returncode == 0, dismissed.stderr
    done = cli("unwind", "--run", "comp-2", "--tools", "sagatest.ledger_tools")
    assert done.returncode == 0, done.stdout + done.stderr
