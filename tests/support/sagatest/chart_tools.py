"""Helpers for the Helm chart tests: render charts/agentsaga with the real helm v4 binary
(tools/bin/helm, installed on demand by tools/install_binaries.py) and read the results."""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]  # tests/support/sagatest/ -> the repository
CHART = ROOT / "charts" / "agentsaga"
HELM = ROOT / "tools" / "bin" / "helm"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
MINIMAL_VALUES = CHART / "ci" / "minimal-values.yaml"
EXAMPLE_VALUES = CHART / "examples" / "values-existing-postgres.yaml"
IMAGES = ("--set", "operator.image.repository=registry.example.com/agentsaga/operator",
          "--set", "sidecar.image.repository=registry.example.com/agentsaga/sidecar")
"""The two image settings the chart requires (ci/minimal-values.yaml has them too), for a render
over the bare defaults."""
LOCATION = "postgresql://postgres.databases.svc:5432/agentsaga?sslmode=require"
CREDENTIALS = ("--set", f"postgres.credentials.location={LOCATION}")
"""Where Postgres is: each agent namespace's own credentials, which the chart requires (or the
development flag postgres.allowSharedCredentialForDevelopment); ci/minimal-values.yaml has it."""


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not HELM.exists():
        subprocess.run([sys.executable, str(ROOT / "tools" / "install_binaries.py")], check=True)
    result = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def render(
    *args: str, release: str = "saga", namespace: str = "agentsaga-system", chart: Path = CHART,
    base: Path | None = MINIMAL_VALUES,
) -> list[dict[str, Any]]:
    """`helm template` → the list of manifests (empty documents dropped); cached per arguments.
    `args` apply over `base`: by default ci/minimal-values.yaml, the chart's defaults with the
    one connector they need (without one the chart refuses to render: its sidecar would have no
    tools); None renders the bare defaults. `base` applies to this chart only, not to `chart`."""
    if base is not None and chart == CHART:
        args = ("-f", str(base), *args)
    return copy.deepcopy(_render(args, release, namespace, chart))


@functools.lru_cache(maxsize=32)
def _render(
    args: tuple[str, ...], release: str, namespace: str, chart: Path
) -> list[dict[str, Any]]:
    out = helm("template", release, str(chart), "--namespace", namespace, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def setup_job_secrets(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Secrets the chart's setup hook Job makes in a cluster holding none of them (the
    chart renders none: nothing random at render time), from the plan the render gives it."""
    from agentsaga.operator.generated_secrets import PLAN_VARIABLE, Plan, fresh_secrets

    jobs = [d for d in docs if d["kind"] == "Job"
            and d["metadata"]["labels"].get("app.kubernetes.io/component") == "setup"]
    if not jobs:
        return []
    env = jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    plan = next(e["value"] for e in env if e["name"] == PLAN_VARIABLE)
    return fresh_secrets(Plan.parse(plan))


def with_setup_job(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`docs` and the Secrets its setup Job makes: what the cluster holds after the install."""
    return [*docs, *setup_job_secrets(docs)]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def sidecar_template(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The parsed sidecar.json of the rendered sidecar-template ConfigMap."""
    maps = [d for d in find(docs, "ConfigMap") if "sidecar.json" in (d.get("data") or {})]
    assert len(maps) == 1
    template: dict[str, Any] = json.loads(maps[0]["data"]["sidecar.json"])
    return template


def crd_schema(path: Path) -> dict[str, Any]:
    """The openAPIV3Schema of the (first) version of a CRD file, for jsonschema."""
    crd = yaml.safe_load(path.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def validate_custom_resource(doc: dict[str, Any], schema: dict[str, Any]) -> None:
    """jsonschema against a CRD's openAPIV3Schema, without checking the schema itself: CRD
    patterns are Go RE2 (`^(?i)(abort|warn)?$` in the Prometheus Operator's), which Python's `re`
    refuses as a whole; only the patterns of fields a document sets are compiled."""
    import jsonschema

    jsonschema.Draft202012Validator(schema).validate(doc)
