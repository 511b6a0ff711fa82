"""The sidecar-injection webhook on a real API server: the chart's MutatingWebhookConfiguration
(its rules, selectors and failure policy as installed by helm, its endpoint moved to loopback:
`sagatest.cluster.chart.serve_webhook_locally`), the operator's webhook server over TLS with the
chart's own sidecar template. A labelled pod created through the API comes back with the
sidecar; an unlabelled one is left alone; with the webhook down, a labelled pod is refused
(failurePolicy Fail) and nothing starts without its sidecar."""

from __future__ import annotations

import json
import time
from typing import Any

from sagatest.cluster.chart import RELEASE, RELEASE_NS, serve_webhook_locally
from sagatest.cluster.kube import ApiError, Kube, object_path
from sagatest.operator_fixtures import Cluster

SIDECAR = "agentsaga-sidecar"


def pod(name: str, *, inject: bool) -> dict[str, Any]:
    labels = {"app": "refund-agent", **({"agentsaga.io/inject": "true"} if inject else {})}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"serviceAccountName": "agentsaga-sidecar",
                     "containers": [{"name": "agent", "image": "example/agent:1"}]}}


def create(kube: Kube, manifest: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    created: dict[str, Any] = kube.call("POST", object_path("v1", "pods", "default"), manifest,
                                        query={"dryRun": "All"} if dry_run else None)
    return created


def start_with_webhook(cluster: Cluster) -> None:
    """The operator serving the webhook with the chart's rendered sidecar template; returns once
    the API server's call through the webhook succeeds (a server-side dry run)."""
    configmap = cluster.kube.get("v1", "configmaps", RELEASE_NS,
                                 f"{RELEASE}-agentsaga-sidecar-template")
    assert configmap is not None
    template = cluster.workdir / "chart-sidecar.json"
    template.write_text(configmap["data"]["sidecar.json"])
    port = serve_webhook_locally(cluster.kube, cluster.workdir / "webhook-tls")
    cluster.start_operator("--standalone", "--webhook-port", str(port), "--webhook-cert-dir",
                           str(cluster.workdir / "webhook-tls"),
                           env={"AGENTSAGA_SIDECAR_TEMPLATE": str(template)})
    deadline = time.monotonic() + 30
    while True:
        try:
            create(cluster.kube, pod("probe", inject=True), dry_run=True)
            return
        except ApiError as error:
            assert time.monotonic() < deadline, f"the webhook never answered: {error}"
            time.sleep(0.1)


def containers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = obj["spec"]
    return {c["name"]: c for c in [*(spec.get("initContainers") or []), *spec["containers"]]}


def test_a_labelled_pod_gets_the_sidecar_and_an_unlabelled_one_does_not(
        cluster: Cluster) -> None:
    start_with_webhook(cluster)

    injected = create(cluster.kube, pod("agent-0", inject=True))
    sidecar = containers(injected)[SIDECAR]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar: an init container
    assert sidecar["image"] == "agentsaga-sidecar:test"  # the chart's image settings
    assert {"name": "AGENTSAGA_POD_UID", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "metadata.uid"}}} in sidecar["env"]
    stored = cluster.kube.get("v1", "pods", "default", "agent-0")
    assert stored is not None and SIDECAR in containers(stored)  # as the API server keeps it

    plain = create(cluster.kube, pod("other-0", inject=False))
    assert list(containers(plain)) == ["agent"]


def test_with_the_webhook_down_a_labelled_pod_is_refused(cluster: Cluster) -> None:
    start_with_webhook(cluster)
    for operator in cluster.operators:
        operator.stop()

    try:
        create(cluster.kube, pod("agent-1", inject=True))
        refused = None
    except ApiError as error:
        refused = error
    assert refused is not None, "a pod that asked for a sidecar started without one"
    assert refused.code == 500 and "inject-sidecar.agentsaga.io" in str(refused), refused
    assert cluster.kube.get("v1", "pods", "default", "agent-1") is None
    # pods that did not ask for a sidecar are not held up by its webhook
    assert list(containers(create(cluster.kube, pod("other-1", inject=False)))) == ["agent"]
    events = json.dumps(cluster.kube.objects("v1", "pods", "default"))
    assert "agent-1" not in events
