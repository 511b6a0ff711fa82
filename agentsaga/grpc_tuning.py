"""gRPC core experiments the sidecar and the client run with, set before grpc is imported.

grpcio's EventEngine paths (listener, client, the callback completion queue, "all other
endpoints") cost a sequential dispatch about 0.3 ms of thread hand-offs on both sides (a health
RPC 0.50 → 0.35 ms, a dispatch 1.81 → 1.51 ms on the 2-core development machine; `agentsaga
bench` measures it). They are turned off through `GRPC_EXPERIMENTS`, which grpc core reads once,
when it starts: `agentsaga/__init__.py` calls `apply()` first thing, so any process that imports
agentsaga before grpc (the sidecar, `SagaClient`, the CLI) runs with them.

`AGENTSAGA_GRPC_EXPERIMENTS` chooses the value (empty: grpc's own defaults); a `GRPC_EXPERIMENTS`
already in the environment wins. The experiment names are grpcio's (checked with grpcio 1.85;
`pyproject.toml` pins the range): an unknown name is ignored by grpc with a log line, so a
later grpcio that drops them loses the speed-up, not the service.
"""

from __future__ import annotations

import os
import sys

DEFAULT = ("-event_engine_listener,-event_engine_for_all_other_endpoints,-event_engine_client,"
           "-event_engine_callback_cq")
VARIABLE = "AGENTSAGA_GRPC_EXPERIMENTS"
"""Declared in `agentsaga.settings.Settings.grpc_experiments` (read here before anything else
is imported, so by name)."""


def apply() -> bool:
    """Set GRPC_EXPERIMENTS unless it is set or grpc was imported already; True if set here."""
    if "GRPC_EXPERIMENTS" in os.environ or "grpc" in sys.modules:
        return False
    value = os.environ.get(VARIABLE, DEFAULT)
    if not value:
        return False
    os.environ["GRPC_EXPERIMENTS"] = value
    return True
