"""The chart's setup hook Job against a real API server: its program (`python -P -m
agentsaga.operator.generated_secrets`, the Job's command) runs with the Job's environment as
the chart renders it, under a token of the Job's ServiceAccount bound to the Job's rendered
RBAC (and nothing else), and the CRD files the Job mounts. No pod runs on this control plane,
so the program runs as a process here, as the Job's container would.

- First run: the webhook's certificate (for the Service's names, signed by its CA), each agent
  namespace's access token and database credentials, the migration Job's copy of every
  password by role name.
- Second run (an upgrade, an Argo CD sync): every Secret is kept byte for byte.
- A served CRD older than the chart's is replaced by the chart's version (Helm never updates
  crds/), and the AgentRuns stored under it are kept.
- The operator's `--webhook-configuration`: it sets the chart's MutatingWebhookConfiguration's
  caBundle from the certificate the Job made, with the chart's operator RBAC.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509

from agentsaga.operator.ca_bundle import inject_ca_bundle
from sagatest.chart_tools import (
    CHART,
    CREDENTIALS,
    FULL_VALUES,
    IMAGES,
    MINIMAL_VALUES,
    ROOT,
    find,
    helm,
    one,
    render,
)
from sagatest.cluster.chart import RELEASE, RELEASE_NS, WEBHOOK, install_chart
from sagatest.cluster.kube import Kube

AGENTS = ("agents", "payments")
VALUES = (*IMAGES, *CREDENTIALS, "--set", f"sidecar.namespaces={{{','.join(AGENTS)}}}")
SETUP = f"{RELEASE}-agentsaga-setup"
CRD = "agentruns.agentsaga.io"
Obj = dict[str, Any]


def _hooks() -> list[Obj]:
    return [d for d in render(*VALUES) if d["metadata"].get("name", "").startswith(SETUP)]


def _prepare(kube: Kube, crd_dir: Path) -> tuple[Path, dict[str, str]]:
    """The Job's RBAC applied, its namespaces made; a kubeconfig of its ServiceAccount and
    the Job's environment (its CRD folder moved to `crd_dir`)."""
    for name in (RELEASE_NS, *AGENTS):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    hooks = _hooks()
    kube.apply(*[d for d in hooks if d["kind"] not in ("Job", "ConfigMap")])
    crd_dir.mkdir(parents=True, exist_ok=True)
    for name, text in one(hooks, "ConfigMap", f"{SETUP}-crds")["data"].items():
        (crd_dir / name).write_text(text)
    container = one(hooks, "Job")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-P", "-m", "agentsaga.operator.generated_secrets"]
    env = {e["name"]: e["value"] for e in container["env"]}
    plan = json.loads(env["AGENTSAGA_GENERATED_SECRETS"])
    assert plan["crds"] == "/etc/agentsaga/crds"
    plan["crds"] = str(crd_dir)
    env["AGENTSAGA_GENERATED_SECRETS"] = json.dumps(plan)
    return kube.plane.service_account_kubeconfig(RELEASE_NS, SETUP), env


def _run(kube: Kube, kubeconfig: Path, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-P", "-m", "agentsaga.operator.generated_secrets"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**kube.env(kubeconfig), **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _secret(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    found = kube.get("v1", "secrets", namespace, name)
    assert found is not None, f"no Secret {namespace}/{name}"
    return {k: base64.b64decode(v).decode() for k, v in found["data"].items()}


def test_the_setup_job_makes_each_secret_once_and_keeps_it(kube: Kube, tmp_path: Path) -> None:
    kube.install_crds(CHART / "crds")
    kubeconfig, env = _prepare(kube, tmp_path / "crds")

    said = _run(kube, kubeconfig, env)
    assert f"made {RELEASE_NS}/{WEBHOOK}-tls" in said, said
    tls = _secret(kube, RELEASE_NS, f"{WEBHOOK}-tls")
    cert = x509.load_pem_x509_certificate(tls["tls.crt"].encode())
    ca = x509.load_pem_x509_certificate(tls["ca.crt"].encode())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{WEBHOOK}.{RELEASE_NS}.svc" in names.get_values_for_type(x509.DNSName)

    first: dict[str, dict[str, str]] = {}
    passwords: dict[str, str] = {}
    for namespace in AGENTS:
        token = _secret(kube, namespace, f"{RELEASE}-agentsaga-sidecar-access")
        assert len(token["token"]) >= 40
        credentials = _secret(kube, namespace, f"{RELEASE}-agentsaga-db-credentials")
        assert credentials["sidecar-user"] == f"agentsaga_ns_{namespace}"
        assert credentials["job-user"] == f"agentsaga_job_{namespace}"
        assert credentials["sidecar-password"] != credentials["job-password"]
        passwords[credentials["sidecar-user"]] = credentials["sidecar-password"]
        passwords[credentials["job-user"]] = credentials["job-password"]
        first[namespace] = {**token, **credentials}
    migrate = _secret(kube, RELEASE_NS, f"{RELEASE}-agentsaga-db-credentials-migrate")
    assert migrate == passwords
    assert len(set(passwords.values())) == 4

    # an upgrade (or a GitOps sync) runs it again: nothing is re-keyed
    said = _run(kube, kubeconfig, env)
    assert "made" not in said.replace("made crd/", ""), said
    assert _secret(kube, RELEASE_NS, f"{WEBHOOK}-tls") == tls
    for namespace in AGENTS:
        assert {**_secret(kube, namespace, f"{RELEASE}-agentsaga-sidecar-access"),
                **_secret(kube, namespace, f"{RELEASE}-agentsaga-db-credentials")
                } == first[namespace]
    assert _secret(kube, RELEASE_NS, f"{RELEASE}-agentsaga-db-credentials-migrate") == migrate


def test_an_upgrade_replaces_an_older_crd_and_keeps_the_agentruns(kube: Kube,
                                                                   tmp_path: Path) -> None:
    chart_crd = yaml.safe_load((CHART / "crds" / f"{CRD}.yaml").read_text())
    # the CRD as an older chart served it: one printer column fewer, one label of its own
    older = copy.deepcopy(chart_crd)
    older["metadata"].setdefault("labels", {})["example.com/owner"] = "platform"
    version = older["spec"]["versions"][0]
    dropped = version["additionalPrinterColumns"].pop()
    kube.apply(older)
    kube.install_crds(CHART / "crds")  # the peering CRDs; AgentRun unchanged (same content)
    kube.apply(older)
    kubeconfig, env = _prepare(kube, tmp_path / "crds")
    kube.create({"apiVersion": "agentsaga.io/v1alpha1", "kind": "AgentRun",
                 "metadata": {"name": "kept", "namespace": AGENTS[0]},
                 "spec": {"agent": "refund-agent"}})

    said = _run(kube, kubeconfig, env)
    assert f"made crd/{CRD} (replaced)" in said, said
    served = kube.get("apiextensions.k8s.io/v1", "customresourcedefinitions", None, CRD)
    assert served is not None
    assert dropped in served["spec"]["versions"][0]["additionalPrinterColumns"]
    assert served["metadata"]["labels"]["example.com/owner"] == "platform"
    assert kube.get("agentsaga.io/v1alpha1", "agentruns", AGENTS[0], "kept") is not None


def test_the_operator_sets_the_webhook_ca_bundle_from_the_job_certificate(
        kube: Kube, tmp_path: Path) -> None:
    from kubernetes import config

    install_chart(kube, AGENTS, *CREDENTIALS)
    configuration = kube.get("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations",
                             None, WEBHOOK)
    assert configuration is not None
    assert "caBundle" not in configuration["webhooks"][0]["clientConfig"]
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    operator = kube.plane.service_account_kubeconfig(RELEASE_NS, f"{RELEASE}-agentsaga-operator")
    api = config.new_client_from_config(config_file=str(operator))  # type: ignore[no-untyped-call]
    try:
        assert inject_ca_bundle(api, WEBHOOK, ca) is True
        assert inject_ca_bundle(api, WEBHOOK, ca) is False  # a second replica: nothing to do
    finally:
        api.close()
    configuration = kube.get("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations",
                             None, WEBHOOK)
    assert configuration is not None
    client_config = configuration["webhooks"][0]["clientConfig"]
    assert base64.b64decode(client_config["caBundle"]) == ca.read_bytes()
    assert client_config["service"]["name"] == WEBHOOK  # the rest of the webhook is the chart's
    assert configuration["webhooks"][0]["failurePolicy"] == "Fail"


def test_two_renders_with_the_same_values_are_byte_identical() -> None:
    """What a GitOps tool does on every sync: render again. Nothing is random at render time."""
    minimal = ("-f", str(MINIMAL_VALUES), *VALUES)
    for args in (minimal, ("-f", str(FULL_VALUES)),
                 (*minimal, "--set", "injection.certificate.certManager.enabled=true",
                  "--set", "injection.certificate.certManager.issuerRef.name=internal-ca")):
        outputs = {helm("template", RELEASE, str(CHART), "--namespace", RELEASE_NS, *args).stdout
                   for _ in range(2)}
        assert len(outputs) == 1, args
    assert not find(render(*VALUES), "Secret")  # no Secret is rendered: the Job makes them
