"""gRPC core experiments the sidecar and the client run with, set before grpc is imported.

grpcio's EventEngine paths (listener, client, the callback completion queue, "all other
endpoints") cost a sequential dispatch about 0.3 ms of thread hand-offs on both sides (a health
RPC 0.50 → 0.35 ms, a dispatch 1.81 → 1.51 ms on the 2-core development machine; `agentsaga
bench` measures it). They are turned off through `GRPC_EXPERIMENTS`, which grpc core reads once,
when grpc is imported (grpcio 1.85: set after `import grpc`, even before the first channel or
server, it is never read).

Importing agentsaga sets nothing: a library that changes its importer's environment is a
surprise. The entry points of the processes agentsaga starts call `apply()` before anything
imports grpc: `agentsaga.cli.main`, which runs every command (the sidecar, the operator, the
Jobs, the bench and the demo with their clients). An agent process of its own calls `apply()`
first thing, before it imports grpc or `agentsaga.client`, to run its client the same way.

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
    """Set GRPC_EXPERIMENTS for this process (and the processes it starts) unless it is set or
    grpc was imported already (grpc core would never read it); True if set here."""
    if "GRPC_EXPERIMENTS" in os.environ or "grpc" in sys.modules:
        return False
    value = os.environ.get(VARIABLE, DEFAULT)
    if not value:
        return False
    os.environ["GRPC_EXPERIMENTS"] = value
    return True
