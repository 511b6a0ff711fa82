"""Each image holds only what its process imports: the sidecar image (the sidecar, the migration
Job, the reconcile/unwind Jobs) is built without kopf and the Kubernetes client, the operator
image without the Stripe SDK. Here, in this environment that has every package, a process that
imports what each image's commands import must never load the packages its image lacks.
"""

from __future__ import annotations

import json
import subprocess
import sys

# What each image's commands import: their modules, and the parser the `agentsaga` command
# builds for them (agentsaga.cli imports only the chosen command's module).
SIDECAR_COMMANDS = ("sidecar", "migrate", "reconcile", "unwind", "corrections", "log", "runs",
                    "approve", "settle", "connectors", "mcp")
OPERATOR_COMMANDS = ("operator", "prune")
NEVER_IN_SIDECAR = ("kubernetes", "kopf", "jsonpatch", "aiohttp")
NEVER_IN_OPERATOR = ("stripe",)

PROBE = """
import json, sys
from agentsaga import cli
commands = sys.argv[1:]
for name in commands:
    cli.build_parser(only=name, commands=cli.COMMANDS)
import agentsaga.connectors.tools  # the standard tool set (Stripe's only when configured)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def _loaded(commands: tuple[str, ...], *modules: str) -> set[str]:
    code = "".join(f"import {module}\n" for module in modules) + PROBE
    result = subprocess.run([sys.executable, "-P", "-c", code, *commands], capture_output=True,
                            text=True, timeout=120, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_a_sidecar_and_its_jobs_never_import_kopf_or_kubernetes() -> None:
    loaded = _loaded(SIDECAR_COMMANDS, "agentsaga.sidecar.main", "agentsaga.cli.job_commands",
                     "agentsaga.client", "agentsaga")
    assert "agentsaga" in loaded and "grpc" in loaded and "psycopg" in loaded  # it did import
    assert not loaded & set(NEVER_IN_SIDECAR), loaded & set(NEVER_IN_SIDECAR)


def test_the_operator_never_imports_the_stripe_sdk() -> None:
    loaded = _loaded(OPERATOR_COMMANDS, "agentsaga.operator.main", "agentsaga.cli.prune")
    assert "kopf" in loaded and "kubernetes" in loaded  # it did import the operator
    assert not loaded & set(NEVER_IN_OPERATOR), loaded & set(NEVER_IN_OPERATOR)


def test_the_probe_sees_a_vendor_sdk_once_it_is_configured() -> None:
    # the check above can fail: the standard tool set imports Stripe's SDK when Stripe is set
    code = ("import os, sys\nos.environ['AGENTSAGA_STRIPE_API_KEY'] = 'sk_test_x'\n"
            "import agentsaga.connectors.tools\nprint('stripe' in sys.modules)")
    result = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                            timeout=120, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
