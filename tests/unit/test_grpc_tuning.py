"""Importing agentsaga changes nothing in the importing process: no environment variable (grpc's
`GRPC_EXPERIMENTS` included) is set by any of its modules. The `agentsaga` command, which runs
the sidecar and every other process agentsaga starts, sets `GRPC_EXPERIMENTS` before grpc is
imported, when grpc core reads it (a preset value wins; an empty choice leaves grpc's
defaults)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from agentsaga import grpc_tuning

CHOICE = grpc_tuning.VARIABLE  # AGENTSAGA_GRPC_EXPERIMENTS

# Every module of the package, each imported on its own; the environment compared before and
# after. `agentsaga.connectors.mcp_tools` is a tools module: importing it registers the tools of
# the upstreams file AGENTSAGA_MCP_UPSTREAMS names, and refuses to without one; a `__main__`
# module runs its command when imported.
IMPORT_ALL = textwrap.dedent("""
    import importlib, json, os, pkgutil, sys

    before = dict(os.environ)
    import agentsaga

    names = [m.name for m in pkgutil.walk_packages(agentsaga.__path__, "agentsaga.")
             if m.name != "agentsaga.connectors.mcp_tools"
             and not m.name.endswith(".__main__")]
    for name in names:
        importlib.import_module(name)
    after = dict(os.environ)
    print(json.dumps({
        "imported": len(names), "grpc": "grpc" in sys.modules,
        "set": {k: v for k, v in after.items() if before.get(k) != v},
        "removed": sorted(before.keys() - after.keys()),
    }))
""")

# The `agentsaga` command's entry point, as the console script calls it; what
# GRPC_EXPERIMENTS held when grpc was first imported (the audit hook sees that import).
AT_GRPC_IMPORT = textwrap.dedent("""
    import json, os, sys

    seen = []

    def hook(event, args):
        if event == "import" and args[0] == "grpc" and not seen:
            seen.append(os.environ.get("GRPC_EXPERIMENTS"))

    sys.addaudithook(hook)
    from agentsaga.cli import main

    try:
        main(["sidecar", "--help"])
    except SystemExit:
        pass
    print(json.dumps({"imported": bool(seen), "value": seen[0] if seen else None}))
""")


def run_python(script: str, env: dict[str, str]) -> dict[str, Any]:
    """`script` in a fresh interpreter with `env` (minus any gRPC experiments this process
    has); its last line of output, as JSON."""
    base = {k: v for k, v in os.environ.items() if k not in ("GRPC_EXPERIMENTS", CHOICE)}
    done = subprocess.run([sys.executable, "-P", "-c", script], env={**base, **env},
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def test_importing_every_module_of_agentsaga_leaves_the_environment_as_it_was() -> None:
    answer = run_python(IMPORT_ALL, {})
    assert answer["imported"] > 100  # the whole package: sidecar, operator, client, store, ...
    assert answer["grpc"]  # grpc itself was imported along the way
    assert (answer["set"], answer["removed"]) == ({}, [])


@pytest.mark.parametrize(("env", "expected"), [
    ({}, grpc_tuning.DEFAULT),
    ({CHOICE: "-event_engine_client"}, "-event_engine_client"),
    ({CHOICE: ""}, None),
    ({"GRPC_EXPERIMENTS": "event_engine_client", CHOICE: "-event_engine_client"},
     "event_engine_client"),
], ids=["default", "chosen", "grpc-defaults", "preset-wins"])
def test_the_agentsaga_command_sets_the_experiments_before_grpc_is_imported(
        env: dict[str, str], expected: str | None) -> None:
    assert run_python(AT_GRPC_IMPORT, env) == {"imported": True, "value": expected}
