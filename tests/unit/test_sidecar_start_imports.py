"""What a sidecar's start-up leaves for later: the reflection service is made at its first call
(its library and descriptors cost memory and start-up time no agent's call uses), and a product
command reads no distribution's entry points (each read scans every installed distribution)."""

from __future__ import annotations

import json
import subprocess
import sys

from grpc_reflection.v1alpha import reflection

from agentsaga.sidecar import server

PROBE = """
import json, sys
from importlib import metadata
scans = []
real = metadata.entry_points
def counted(**kwargs):
    scans.append(kwargs.get("group"))
    return real(**kwargs)
metadata.entry_points = counted
from agentsaga import cli
cli.build_parser(only="sidecar", commands=dict(cli.COMMANDS))
from agentsaga.sidecar.server import SidecarServicer, serve
serving = serve(SidecarServicer(None), "127.0.0.1:0")  # type: ignore[arg-type]
serving.stop()
print(json.dumps({"reflection": "grpc_reflection.v1alpha.reflection" in sys.modules,
                  "propagate": "opentelemetry.propagate" in sys.modules, "scans": scans}))
"""


def test_the_reflection_service_is_named_as_its_library_names_it() -> None:
    assert server.REFLECTION_SERVICE == reflection.SERVICE_NAME


def test_a_started_sidecar_has_not_imported_reflection_or_read_plugin_entry_points() -> None:
    result = subprocess.run([sys.executable, "-P", "-c", PROBE], capture_output=True, text=True,
                            timeout=120, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["reflection"] is False
    assert found["propagate"] is False
    # OpenTelemetry's context reads its own group once; the commands' plugins are not read
    assert "agentsaga.commands" not in found["scans"]
    assert "opentelemetry_propagator" not in found["scans"]
