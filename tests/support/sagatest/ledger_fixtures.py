"""`ledger`: a fresh database whose `ledger` tables hold the test tools' effects (the ground
truth of the core tests; see sagatest/ledger_tools.py), with LEDGER_DSN set for them.
`ledger_service`: an in-process `SagaService` over that database with the ledger's tools."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.store import SagaLog
from sagatest import ledger_tools


@pytest.fixture
def ledger(pg: str, monkeypatch: pytest.MonkeyPatch) -> str:
    ledger_tools.setup(pg)
    monkeypatch.setenv("LEDGER_DSN", pg)
    return pg


@pytest.fixture
def ledger_service(pg: str, ledger: str) -> Iterator[SagaService]:
    """The service a sidecar would run, in this process, with no real pause to re-check."""
    saga_log = SagaLog(pg, min_size=1, max_size=4).open()
    yield SagaService(saga_log, ledger_tools.build_registry(), Settings(recheck_pause_s=0.01),
                      sleep=lambda _: None)
    saga_log.close()
