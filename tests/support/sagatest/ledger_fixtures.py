"""`ledger`: a fresh database whose `ledger` tables hold the test tools' effects (the ground
truth of the core tests; see sagatest/ledger_tools.py), with LEDGER_DSN set for them."""

from __future__ import annotations

import pytest

from sagatest import ledger_tools


@pytest.fixture
def ledger(pg: str, monkeypatch: pytest.MonkeyPatch) -> str:
    ledger_tools.setup(pg)
    monkeypatch.setenv("LEDGER_DSN", pg)
    return pg
