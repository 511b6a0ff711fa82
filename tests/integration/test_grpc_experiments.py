"""The sidecar runs with the gRPC experiments the project chooses: `agentsaga sidecar` sets
`GRPC_EXPERIMENTS` before grpc is imported, so grpc core reads the chosen value (a name grpc
does not know, added to the default, is reported by grpc core as it reads them), and serves."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentsaga import grpc_tuning
from sagatest.ledger_tools import effects
from sagatest.sidecar_fixtures import SidecarProcess

TOOLS = "sagatest.ledger_tools"
PROBE = "agentsaga_test_probe"


def test_the_sidecar_runs_with_the_chosen_experiments(
        sidecar_factory: Callable[..., SidecarProcess], ledger: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)  # set in this process (conftest)
    sidecar = sidecar_factory(
        ledger, TOOLS, env={grpc_tuning.VARIABLE: f"{grpc_tuning.DEFAULT},{PROBE}"})
    # printed before "listening on": grpc core read the whole value when grpc was imported
    assert f"Unknown experiment: {PROBE}" in "".join(sidecar.lines)
    client = sidecar.client()
    client.begin_run("tuned")
    result = client.dispatch("tuned", "create_ticket",
                             {"summary": "Refund for order 1182", "order_id": "1182"})
    [ticket] = effects(ledger, "ticket")
    assert result["id"] == f"TICKET-{ticket['id']}"
