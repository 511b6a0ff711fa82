"""The chart installed into a real control plane by the real `helm install`, and the people and
programs that then talk to the API server, each as itself.

`install_chart` installs charts/agentsaga as release `saga` in `agentsaga-system` (its CRDs,
ServiceAccounts, RBAC, the approval ValidatingAdmissionPolicy and its binding, the webhook
configuration, the operator's Deployment): exactly what a platform team's `helm install`
creates, with the values a test adds. The operator runs out of the cluster in these tests (a
process the test starts, with a TokenRequest token of the chart's operator ServiceAccount), so
the chart's Deployment is scaled to zero after the install: the images it names are not pulled
here.

The one piece of cluster networking adapted: a Service that routes to a process on this
machine. The chart's MutatingWebhookConfiguration names the operator's webhook Service; with no
pod network here, `serve_webhook_locally` rewrites its clientConfig to a URL on loopback with
a CA of the test's own (the operator serves it with a certificate for 127.0.0.1), as
controller-runtime's envtest does for the webhooks of the operators it tests. Everything else in
the configuration (rules, selectors, failure policy, timeouts) stays the chart's.

Identities:
- `operator_kubeconfig`: the chart's operator ServiceAccount (what its pod mounts), so the
  operator can do what the chart grants it, no more;
- `person_kubeconfig`: a person (client certificate, as `kubectl` users of a real cluster
  have), allowed only what the test's RoleBindings give (`bind_user`).
"""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from sagatest.chart_tools import CHART, HELM, MINIMAL_VALUES
from sagatest.cluster import pki
from sagatest.cluster.kube import Kube
from sagatest.cluster.processes import free_port

RELEASE = "saga"
RELEASE_NS = "agentsaga-system"
OPERATOR_SA = "saga-agentsaga-operator"
OPERATOR = f"system:serviceaccount:{RELEASE_NS}:{OPERATOR_SA}"
APPROVER_ROLE = "agentsaga-approver"
AR = "agentsaga.io/v1alpha1"
# The images the chart names: never pulled here (no kubelet pulls images; the operator's
# Deployment is scaled to zero and Job pods run as local processes).
IMAGES = ("--set", "operator.image.repository=agentsaga-operator",
          "--set", "operator.image.tag=test",
          "--set", "sidecar.image.repository=agentsaga-sidecar",
          "--set", "sidecar.image.tag=test")


def install_chart(kube: Kube, agent_namespaces: Sequence[str] = ("default",),
                  *values: str) -> None:
    """`helm install` the chart with `sidecar.namespaces` = `agent_namespaces` (created where
    missing) over ci/minimal-values.yaml, then `values` (`--set`/`-f` arguments); the database
    is migrated by the test's own fixtures, not by the chart's hook Job, and the chart's setup
    hook Job (its Secrets, the CRD upgrade) does not run either: no pod runs on this control
    plane (tests/e2e/test_chart_setup_job.py runs that Job's program on its own)."""
    for name in agent_namespaces:
        if kube.get("v1", "namespaces", None, name) is None:
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    helm(kube, "install", RELEASE, str(CHART), "--namespace", RELEASE_NS, "--create-namespace",
         "-f", str(MINIMAL_VALUES), *IMAGES,
         "--set", f"sidecar.namespaces={{{','.join(agent_namespaces)}}}",
         "--set", "postgres.migration.enabled=false", "--set", "setupJob.enabled=false",
         *values)
    deployment = f"{RELEASE}-agentsaga-operator"
    scaled = kube.kubectl("scale", "deployment", deployment, "-n", RELEASE_NS, "--replicas=0")
    assert scaled.returncode == 0, scaled.stderr
    wait_for_the_approval_policy(kube, agent_namespaces[0])


def wait_for_the_approval_policy(kube: Kube, namespace: str, timeout: float = 30.0) -> None:
    """Until the API server enforces the chart's approval policy. A new policy and binding
    take effect a moment after they are created (the admission plugin loads them from its
    informers and compiles the CEL), and nothing reports when: ask it, with a server-side dry
    run of a status change that the policy refuses to anyone but the operator."""
    probe = "chart-policy-probe"
    kube.create({"apiVersion": AR, "kind": "AgentRun",
                 "metadata": {"name": probe, "namespace": namespace},
                 "spec": {"agent": "probe"}})
    deadline = time.monotonic() + timeout
    while True:
        tried = kube.kubectl("patch", "agentrun", probe, "-n", namespace, "--subresource=status",
                             "--type=merge", "--dry-run=server",
                             "-p", '{"status": {"phase": "Committing"}}')
        if tried.returncode != 0 and "ValidatingAdmissionPolicy" in tried.stderr:
            break
        assert time.monotonic() < deadline, f"the approval policy is not enforced: {tried}"
        time.sleep(0.1)
    kube.delete(AR, "agentruns", namespace, probe)


def helm(kube: Kube, *args: str) -> str:
    """tools/bin/helm against `kube` as its admin; its output (an AssertionError if it fails)."""
    done = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=180,
                          env=kube.env())
    assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def bind_user(kube: Kube, namespace: str, name: str, kind: str, role: str, user: str) -> None:
    """A RoleBinding of `role` (a Role or ClusterRole) to User `user` in `namespace`."""
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": name, "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind,
                             "name": role},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                               "name": user}]})


def operator_kubeconfig(kube: Kube) -> Path:
    """A kubeconfig with a TokenRequest token of the chart's operator ServiceAccount."""
    return kube.plane.service_account_kubeconfig(RELEASE_NS, OPERATOR_SA)


def person_kubeconfig(kube: Kube, user: str, groups: Sequence[str] = ()) -> Path:
    """A kubeconfig of a person: a client certificate for `user` in `groups`."""
    return kube.plane.user_kubeconfig(user, groups)


WEBHOOK = f"{RELEASE}-agentsaga-webhook"


def serve_webhook_locally(kube: Kube, cert_dir: Path) -> int:
    """Point the chart's webhook configuration at https://127.0.0.1:PORT (same paths) and write
    into `cert_dir` the tls.crt, tls.key and ca.crt the operator's webhook server then serves
    (`--webhook-cert-dir`); returns PORT, for `--webhook-port`."""
    authority = pki.Authority("agentsaga-test-webhook-ca")
    cert_dir.mkdir(parents=True, exist_ok=True)
    authority.serving("127.0.0.1", ["127.0.0.1"]).write(cert_dir / "tls.crt",
                                                         cert_dir / "tls.key")
    (cert_dir / "ca.crt").write_bytes(authority.cert_pem)
    port = free_port()
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WEBHOOK}"
    configuration = kube.call("GET", path)
    for webhook in configuration["webhooks"]:
        service = webhook["clientConfig"]["service"]
        webhook["clientConfig"] = {
            "url": f"https://127.0.0.1:{port}{service.get('path', '/')}",
            "caBundle": base64.b64encode(authority.cert_pem).decode()}
    kube.call("PUT", path, configuration)
    return port
