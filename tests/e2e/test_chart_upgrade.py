"""`helm upgrade` and `helm uninstall` of the chart on a real control plane (the real helm v4
and API server), with a run under way: an AgentRun waiting at its pivot (its status written by
the operator's identity, as the operator writes it from the saga log) and the Secrets the setup
Job made (its program run with its rendered plan: no pod runs on this control plane).

- `helm upgrade` with another agent namespace: the AgentRun and its status are untouched, the
  existing Secrets keep every byte, the new namespace gets its own, the operator's RBAC and
  peering follow the namespaces, and the webhook's caBundle the operator set survives the
  upgrade (Helm does not own it).
- `helm uninstall`: the CRDs and the AgentRun stay (Helm never deletes crds/), the setup Job's
  Secrets stay, and everything of the release is gone; installing again finds the run.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from sagatest.chart_tools import CHART, CREDENTIALS, MINIMAL_VALUES, ROOT
from sagatest.cluster.chart import (
    AR,
    IMAGES,
    RELEASE,
    RELEASE_NS,
    WEBHOOK,
    helm,
    install_chart,
    operator_kubeconfig,
)
from sagatest.cluster.kube import Kube

RUN = "refund-upgrade"
STAGED = {"phase": "AwaitingApproval",
          "pivot": {"state": "AwaitingApproval", "planHash": "d" * 64,
                    "commit": [{"tool": "capture_charge", "class": "irreversible"}]}}
Obj = dict[str, Any]
RENDERED_SECRETS_COMMIT = "a43018160fe355fab8852fc32ff71e5329704064"
"""The chart as it was when it rendered its Secrets (randAlphaNum, genCA and lookup)."""


def _values(*namespaces: str) -> tuple[str, ...]:
    return ("-f", str(MINIMAL_VALUES), *IMAGES, *CREDENTIALS,
            "--set", f"sidecar.namespaces={{{','.join(namespaces)}}}",
            "--set", "postgres.migration.enabled=false", "--set", "setupJob.enabled=false")


def _run_setup_job(kube: Kube, *namespaces: str) -> None:
    """The setup Job's program with the plan a render of these values gives it, as the admin
    (its own RBAC is tests/e2e/test_chart_setup_job.py's)."""
    rendered = helm(kube, "template", RELEASE, str(CHART), "--namespace", RELEASE_NS,
                    *_values(*namespaces), "--set", "setupJob.enabled=true",
                    "--set", "setupJob.upgradeCRDs=false",
                    "--show-only", "templates/setup-job.yaml")
    job = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Job"][0]
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    done = subprocess.run([sys.executable, "-P", "-m", "agentsaga.operator.generated_secrets"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**kube.env(), **env})
    assert done.returncode == 0, done.stderr


def _secrets(kube: Kube, *namespaces: str) -> dict[str, Obj]:
    names = {f"{RELEASE}-agentsaga-sidecar-access", f"{RELEASE}-agentsaga-db-credentials"}
    out = {}
    for namespace in namespaces:
        for name in names:
            found = kube.get("v1", "secrets", namespace, name)
            assert found is not None, (namespace, name)
            out[f"{namespace}/{name}"] = found["data"]
    return out


def _release_objects(kube: Kube) -> list[str]:
    listed = kube.kubectl("get", "deployments,serviceaccounts,roles,rolebindings,configmaps",
                          "-A", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    cluster = kube.kubectl("get", "clusterroles,mutatingwebhookconfigurations,"
                           "validatingadmissionpolicies", "-l",
                           f"app.kubernetes.io/instance={RELEASE}", "-o", "name")
    assert cluster.returncode == 0, cluster.stderr
    return [*listed.stdout.split(), *cluster.stdout.split()]


def test_upgrade_and_uninstall_keep_the_runs_the_crds_and_the_secrets(kube: Kube) -> None:
    install_chart(kube, ["agents"], *CREDENTIALS)
    _run_setup_job(kube, "agents")
    kube.create({"apiVersion": AR, "kind": "AgentRun",
                 "metadata": {"name": RUN, "namespace": "agents"},
                 "spec": {"agent": "refund-agent"}})
    staged = kube.kubectl("patch", "agentrun", RUN, "-n", "agents", "--subresource=status",
                          "--type=merge", "-p", json.dumps({"status": STAGED}),
                          kubeconfig=operator_kubeconfig(kube))
    assert staged.returncode == 0, staged.stderr
    before = kube.get(AR, "agentruns", "agents", RUN)
    assert before is not None
    secrets = _secrets(kube, "agents")
    # the operator sets the caBundle at start (tests/e2e/test_chart_setup_job.py)
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WEBHOOK}"
    bundle = base64.b64encode(b"the operator's CA").decode()
    kube.call("PATCH", path, [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle",
                               "value": bundle}], content_type="application/json-patch+json")

    # -- helm upgrade: a second agent namespace -------------------------------------------
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "billing"}})
    helm(kube, "upgrade", RELEASE, str(CHART), "--namespace", RELEASE_NS,
         *_values("agents", "billing"))
    _run_setup_job(kube, "agents", "billing")
    after = kube.get(AR, "agentruns", "agents", RUN)
    assert after is not None
    assert after["status"] == before["status"] and after["spec"] == before["spec"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    upgraded = _secrets(kube, "agents", "billing")
    assert {k: v for k, v in upgraded.items() if k.startswith("agents/")} == secrets
    assert upgraded[f"billing/{RELEASE}-agentsaga-db-credentials"] != \
        upgraded[f"agents/{RELEASE}-agentsaga-db-credentials"]
    bindings = {b["metadata"]["namespace"] for b in kube.objects(
        "rbac.authorization.k8s.io/v1", "rolebindings")
        if b["metadata"]["name"] == f"{RELEASE}-agentsaga-operator"}
    assert bindings == {RELEASE_NS, "agents", "billing"}
    assert kube.get("kopf.dev/v1", "kopfpeerings", "billing", "agentsaga") is not None
    configuration = kube.call("GET", path)
    assert configuration["webhooks"][0]["clientConfig"]["caBundle"] == bundle
    assert "billing" in json.dumps(configuration["webhooks"][0]["namespaceSelector"])

    # -- helm uninstall ----------------------------------------------------------------------
    helm(kube, "uninstall", RELEASE, "--namespace", RELEASE_NS)
    assert _release_objects(kube) == []
    for crd in ("agentruns.agentsaga.io", "kopfpeerings.kopf.dev",
                "clusterkopfpeerings.kopf.dev"):
        assert kube.get("apiextensions.k8s.io/v1", "customresourcedefinitions", None,
                        crd) is not None, crd
    kept = kube.get(AR, "agentruns", "agents", RUN)
    assert kept is not None and kept["status"] == before["status"]
    assert _secrets(kube, "agents", "billing") == upgraded

    # installing again finds the run and the Secrets as they were
    helm(kube, "install", RELEASE, str(CHART), "--namespace", RELEASE_NS,
         *_values("agents", "billing"))
    again = kube.get(AR, "agentruns", "agents", RUN)
    assert again is not None and again["metadata"]["uid"] == before["metadata"]["uid"]
    assert _secrets(kube, "agents", "billing") == upgraded


def test_an_upgrade_from_a_chart_that_rendered_its_secrets_keeps_them(kube: Kube,
                                                                      tmp_path: Path) -> None:
    """The chart before the setup Job rendered these Secrets (objects of the release); the new
    one renders none, so Helm would delete them on the upgrade after the setup Job kept them.
    The Job annotates them helm.sh/resource-policy: keep, which Helm reads on the live object."""
    old = tmp_path / "old"
    old.mkdir()
    archive = subprocess.run(["git", "archive", RENDERED_SECRETS_COMMIT, "charts/agentsaga"],
                             cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    for name in ("agentsaga-system", "agents"):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    helm(kube, "install", RELEASE, str(old / "charts" / "agentsaga"), "--namespace", RELEASE_NS,
         "-f", str(old / "charts" / "agentsaga" / "ci" / "minimal-values.yaml"), *IMAGES,
         *CREDENTIALS, "--set", "sidecar.namespaces={agents}",
         "--set", "postgres.migration.enabled=false")
    rendered = _secrets(kube, "agents")
    tls = kube.get("v1", "secrets", RELEASE_NS, f"{WEBHOOK}-tls")
    assert tls is not None

    _run_setup_job(kube, "agents")  # the pre-upgrade hook
    helm(kube, "upgrade", RELEASE, str(CHART), "--namespace", RELEASE_NS, *_values("agents"))
    assert _secrets(kube, "agents") == rendered
    kept = kube.get("v1", "secrets", RELEASE_NS, f"{WEBHOOK}-tls")
    assert kept is not None and kept["data"] == tls["data"]
    assert kept["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
