"""Clients that send protobuf bodies or server-side apply: kubectl's generators and helm v4."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

from sagatest.kube_fixtures import ROOT, Kube

HELM = ROOT / "tools" / "bin" / "helm"


def test_kubectl_create_configmap_and_secret_send_protobuf(kube: Kube) -> None:
    made = kube.kubectl("create", "configmap", "settings", "--from-literal=mode=strict")
    assert made.returncode == 0, made.stderr
    secret = kube.kubectl("create", "secret", "generic", "token", "--from-literal=key=s3cr3t",
                          "--type=Opaque")
    assert secret.returncode == 0, secret.stderr
    labelled = kube.kubectl("label", "secret", "token", "agentsaga.io/role=api")
    assert labelled.returncode == 0, labelled.stderr

    cm = kube.get("v1", "configmaps", "default", "settings")
    assert cm is not None and cm["data"] == {"mode": "strict"}
    stored = kube.get("v1", "secrets", "default", "token")
    assert stored is not None
    assert stored["type"] == "Opaque"
    assert base64.b64decode(stored["data"]["key"]) == b"s3cr3t"
    assert stored["metadata"]["labels"] == {"agentsaga.io/role": "api"}


def test_kubectl_server_side_apply_creates_then_merges(kube_with_crds: Kube) -> None:
    run = ("apiVersion: agentsaga.io/v1alpha1\nkind: AgentRun\nmetadata: {name: run1}\n"
           "spec: {agent: a}\n")
    first = kube_with_crds.kubectl("apply", "--server-side", "-f", "-", input=run)
    assert first.returncode == 0, first.stderr
    second = kube_with_crds.kubectl("apply", "--server-side", "-f", "-",
                                    input=run.replace("agent: a", "agent: b"))
    assert second.returncode == 0, second.stderr
    stored = kube_with_crds.get("agentsaga.io/v1alpha1", "agentruns", "default", "run1")
    assert stored is not None
    assert stored["spec"]["agent"] == "b"
    assert stored["metadata"]["generation"] == 2


def test_helm_install_and_uninstall_with_release_secrets(kube: Kube, tmp_path: Path) -> None:
    chart = tmp_path / "tiny"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: tiny\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: tiny}\ndata: {a: b}\n")

    def helm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(HELM), "--kubeconfig", str(kube.kubeconfig), *args],
                              capture_output=True, text=True, env=kube.env(), timeout=60)

    installed = helm("install", "tiny", str(chart))
    assert installed.returncode == 0, installed.stderr
    assert "STATUS: deployed" in installed.stdout
    assert kube.get("v1", "configmaps", "default", "tiny") is not None
    releases = [s["metadata"]["name"] for s in kube.objects("v1", "secrets", "default")]
    assert releases == ["sh.helm.release.v1.tiny.v1"]

    listed = helm("list", "-q")
    assert listed.stdout.split() == ["tiny"]
    removed = helm("uninstall", "tiny")
    assert removed.returncode == 0, removed.stderr
    assert kube.get("v1", "configmaps", "default", "tiny") is None
    assert kube.objects("v1", "secrets", "default") == []
