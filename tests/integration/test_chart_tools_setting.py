"""The chart's tools setting, as rendered, registers tools: `helm template`, then the sidecar
container's AGENTSAGA_TOOLS loaded by the real loader (a fresh process, as in the pod)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentsaga_lab.demo.world import connector_env
from sagatest.chart_tools import EXAMPLE_VALUES, render, sidecar_template

LOAD = ("import json, os; from agentsaga.loading import load_tools; "
        "print(json.dumps(sorted(s.name for s in "
        "load_tools(os.environ['AGENTSAGA_TOOLS'].split(',')))))")


def rendered_tools(*args: str) -> str:
    container = sidecar_template(render(*args))["container"]
    values = {e["name"]: e.get("value") for e in container["env"]}
    tools = values["AGENTSAGA_TOOLS"]
    assert isinstance(tools, str) and tools
    return tools


def load_in_fresh_process(tools: str, env: dict[str, str],
                          cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-c", LOAD], capture_output=True, text=True,
                          timeout=60, cwd=cwd,
                          env={**os.environ, **env, "AGENTSAGA_TOOLS": tools})


@pytest.mark.parametrize("values", [[], ["-f", str(EXAMPLE_VALUES)]], ids=["default", "example"])
def test_rendered_tools_setting_registers_the_connectors(values: list[str],
                                                         tmp_path: Path) -> None:
    tools = rendered_tools(*values)
    loaded = load_in_fresh_process(tools, connector_env("http://127.0.0.1:9"), tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    names = json.loads(loaded.stdout)
    for tool in ("search_orders", "create_ticket", "charge_card", "capture_payment",
                 "send_email", "reship"):
        assert tool in names


def test_the_package_without_tools_module_is_named_in_the_error(tmp_path: Path) -> None:
    loaded = load_in_fresh_process("agentsaga.connectors", connector_env("http://127.0.0.1:9"),
                                   tmp_path)
    assert loaded.returncode != 0
    assert "registered no tools (did you mean agentsaga.connectors.tools?)" in loaded.stderr
