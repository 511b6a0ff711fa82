"""tools/cluster_install.py with the inputs of a cluster of one's own (docs/local-cluster.md,
"Your own cluster"): the values it writes over charts/agentsaga/examples/values-local.yaml
render, with the real helm, an install whose operator, injected sidecar and Jobs run the
registry's images and whose sidecar calls the given stand-ins; the run manifest it applies
names the registry's agent image and the new run everywhere, and is a valid AgentRun and Job;
without KUBECONFIG it says what to set and installs nothing. The install itself, on a real
cluster, is the local cluster's (tests/e2e/test_local_cluster_doc.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sagatest.chart_tools import (
    ROOT,
    crd_schema,
    one,
    render,
    sidecar_template,
    validate_custom_resource,
)

REGISTRY = "registry.example.com/acme"
WORLD = "http://192.0.2.7:8470"


def _tool() -> ModuleType:  # tools/ is not a package
    spec = importlib.util.spec_from_file_location("cluster_install",
                                                  ROOT / "tools" / "cluster_install.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["cluster_install"] = module
    spec.loader.exec_module(module)
    return module


def _inputs(tool: ModuleType, state: Path) -> object:
    images = {name: f"{REGISTRY}/{name_}:1.0" for name, name_ in (
        ("operator", "agentsaga-operator"), ("sidecar", "agentsaga-sidecar-refunds"),
        ("agent", "agentsaga-refund-agent"))}
    return tool.Inputs(images=images,
                       migrate_dsn="postgresql://postgres@db.example.internal:5432/agentsaga",
                       operator_dsn="postgresql://agentsaga_operator@db.example.internal:5432/"
                       "agentsaga",
                       location="postgresql://db.example.internal:5432/agentsaga",
                       world_url=WORLD, state=state)


def test_the_inputs_render_an_install_with_the_registry_s_images(tmp_path: Path) -> None:
    tool = _tool()
    values = tool.install_values(_inputs(tool, tmp_path))
    assert values == tmp_path / "install-values.yaml"
    docs = render("-f", str(tool.VALUES), "-f", str(values), release="agentsaga", base=None)
    operator = one(docs, "Deployment")
    [container] = operator["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{REGISTRY}/agentsaga-operator:1.0"
    assert operator["spec"]["replicas"] == 1
    sidecar = sidecar_template(docs)["container"]
    assert sidecar["image"] == f"{REGISTRY}/agentsaga-sidecar-refunds:1.0"
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert env["EXAMPLE_WORLD_URL"] == WORLD  # the inputs' URL, not the values file's
    assert env["AGENTSAGA_TOOLS"] == "refund_tools"
    namespaces = {d["metadata"].get("namespace") for d in docs}
    assert "refunds" in namespaces  # the agent namespace's own objects


def test_the_run_manifest_is_the_new_run_s_with_the_registry_s_agent(tmp_path: Path) -> None:
    tool = _tool()
    docs = tool.run_manifest(_inputs(tool, tmp_path), "refund-7")
    assert "refund-1" not in json.dumps(docs)
    run, job = docs
    validate_custom_resource(run, crd_schema(ROOT / "crds" / "agentruns.agentsaga.io.yaml"))
    assert run["metadata"] == {"name": "refund-7", "namespace": "refunds"}
    assert run["spec"]["onOrphan"] == "unwind"
    assert job["kind"] == "Job" and job["metadata"]["name"] == "refund-7-agent"
    assert job["spec"]["backoffLimit"] == 0  # an evicted run is never started again
    # the operator's own Jobs carry agentsaga.io/run; the agent's Job must not look like one
    assert "agentsaga.io/run" not in job["metadata"]["labels"]
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["agentsaga.io/inject"] == "true"
    assert pod["metadata"]["annotations"] == {"agentsaga.io/run-id": "refund-7"}
    [agent] = pod["spec"]["containers"]
    assert agent["image"] == f"{REGISTRY}/agentsaga-refund-agent:1.0"
    assert agent["args"] == ["refund-7"]
    [volume] = pod["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "agentsaga-sidecar-access"


def test_without_kubeconfig_it_says_what_to_set(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    code = _tool().main(["--registry", REGISTRY, "--migrate-dsn", "postgresql://db/agentsaga",
                         "--location", "postgresql://db/agentsaga", "--world-url", WORLD])
    assert code == 2
    assert "KUBECONFIG is not set: export KUBECONFIG=" in capsys.readouterr().err
