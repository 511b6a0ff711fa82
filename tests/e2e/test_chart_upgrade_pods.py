"""`helm upgrade` and `helm uninstall` of the chart on a real node (kubelet, containerd, runc:
`sagatest.cluster.node`): its hook Jobs (the setup Job in the operator image, the migration Job
in the sidecar image) run as pods, the operator runs as the chart's Deployment (two replicas
behind their PodDisruptionBudget) and sets its webhook's caBundle itself.

A run is under way: begun in the saga log, its AgentRun created by the operator from it. Then
- `helm upgrade` (another value): both hook Jobs run again; the saga log's rows, the AgentRun
  (same object, same status), every generated Secret's bytes and the webhook's caBundle are
  unchanged, and the webhook still admits an agent pod with its sidecar;
- `helm uninstall`: the CRDs and the AgentRun stay, the Secrets the setup Job made stay, the
  saga log's rows stay; the release's own objects are gone.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.store import SagaLog
from agentsaga_lab.bench.tools import registry
from sagatest.chart_tools import CHART
from sagatest.cluster.chart import helm
from sagatest.cluster.kube import Kube
from sagatest.cluster.node_cluster import NodeCluster
from sagatest.cluster.pod_images import product_images, refund_sidecar

SYSTEM, AGENTS, RELEASE = "agentsaga-system", "refunds", "saga"
AR = "agentsaga.io/v1alpha1"
RUN = "kept-run"
WEBHOOK = f"{RELEASE}-agentsaga-webhook"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def database(pg_server: str) -> Iterator[str]:
    name = f"chartupgrade_{os.getpid()}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(pg_server)
    params["dbname"] = name
    yield make_conninfo(**params)  # type: ignore[arg-type]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _agent_pod(image: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "webhook-probe", "namespace": AGENTS,
                         "labels": {"agentsaga.io/inject": "true"}},
            "spec": {"serviceAccountName": "agentsaga-sidecar",
                     "containers": [{"name": "agent", "image": image}]}}


def _webhook_admits(kube: Kube, image: str, timeout: float = 90.0) -> None:
    """Until a server-side dry run of an agent pod comes back with the sidecar injected: the
    API server reached the operator's webhook through its Service, trusting the caBundle."""
    deadline = time.monotonic() + timeout
    while True:
        tried = kube.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                             input=json.dumps(_agent_pod(image)))
        if tried.returncode == 0:
            assert "agentsaga-sidecar" in tried.stdout, tried.stdout
            return
        assert "failed calling webhook" in tried.stderr, tried.stderr
        assert time.monotonic() < deadline, f"the webhook is not served: {tried.stderr}"
        time.sleep(0.5)


def _rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT run_id, state FROM saga_runs ORDER BY run_id").fetchall()


def _secrets(kube: Kube) -> dict[str, Obj]:
    out = {}
    for namespace, name in ((SYSTEM, f"{WEBHOOK}-tls"),
                            (SYSTEM, f"{RELEASE}-agentsaga-db-credentials-migrate"),
                            (AGENTS, f"{RELEASE}-agentsaga-db-credentials"),
                            (AGENTS, f"{RELEASE}-agentsaga-sidecar-access")):
        found = kube.get("v1", "secrets", namespace, name)
        assert found is not None, (namespace, name)
        out[f"{namespace}/{name}"] = found["data"]
    return out


def _ca_bundle(kube: Kube) -> str:
    found = kube.get("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", None,
                     WEBHOOK)
    assert found is not None
    bundle: str = found["webhooks"][0]["clientConfig"].get("caBundle", "")
    return bundle


def test_upgrade_and_uninstall_with_pods_keep_the_run(node_cluster: NodeCluster,
                                                      database: str) -> None:
    kube = node_cluster.kube
    images = product_images()
    images["sidecar-refunds"] = refund_sidecar(images["sidecar"])
    for image in images.values():
        node_cluster.node.load_image(image.archive, image.reference)
    pod_dsn = node_cluster.dsn_for_pods(database)
    for namespace in (SYSTEM, AGENTS):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    location = conninfo_to_dict(pod_dsn)
    where = f"{location['host']}:{location['port']}/{location['dbname']}"
    for secret, user in (("agentsaga-postgres-operator", "agentsaga_operator"),
                         ("agentsaga-postgres-migrate", location.get("user") or "postgres")):
        kube.create({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": secret, "namespace": SYSTEM},
                     "data": {"dsn": base64.b64encode(
                         f"postgresql://{user}@{where}".encode()).decode()}})
    sidecar, operator = images["sidecar-refunds"], images["operator"]
    values = ("--set", f"sidecar.namespaces={{{AGENTS}}}",
              "--set", f"postgres.credentials.location=postgresql://{where}",
              "--set", f"operator.image.repository={operator.repository}",
              "--set", f"operator.image.tag={operator.tag}",
              "--set", "operator.image.pullPolicy=Never",
              "--set", f"sidecar.image.repository={sidecar.repository}",
              "--set", f"sidecar.image.tag={sidecar.tag}",
              "--set", "sidecar.image.pullPolicy=Never",
              "--set", "sidecar.tools={refund_tools}",
              "--set", "operator.extraArgs={--resync-interval=1}")
    try:
        helm(kube, "install", RELEASE, str(CHART), "--namespace", SYSTEM, "--wait",
             "--timeout=180s", *values)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{node_cluster.node.pod_logs()}") from None
    assert kube.get("policy/v1", "poddisruptionbudgets", SYSTEM,
                    f"{RELEASE}-agentsaga-operator") is not None
    _webhook_admits(kube, images["agent"].reference)
    bundle = _ca_bundle(kube)
    secrets = _secrets(kube)
    assert base64.b64decode(bundle) == base64.b64decode(
        secrets[f"{SYSTEM}/{WEBHOOK}-tls"]["ca.crt"])

    # a run under way: begun in the saga log; the operator creates its AgentRun
    with SagaLog(database, min_size=1, max_size=2).open() as saga_log:
        SagaService(saga_log, registry, Settings(pod_namespace=AGENTS)).begin_run(RUN)
    run = kube.wait_for(AR, "agentruns", AGENTS, RUN,
                        lambda o: o is not None and bool((o.get("status") or {}).get("phase")),
                        timeout=90)
    assert run is not None
    rows = _rows(database)
    assert [r[0] for r in rows] == [f"{AGENTS}/{RUN}"]  # the log keys runs by namespace

    # -- helm upgrade: both hook Jobs run again ----------------------------------------------
    helm(kube, "upgrade", RELEASE, str(CHART), "--namespace", SYSTEM, "--wait",
         "--timeout=180s", *values, "--set", "operator.approvalTtlSeconds=3600")
    assert _secrets(kube) == secrets
    assert _ca_bundle(kube) == bundle
    assert _rows(database) == rows
    after = kube.get(AR, "agentruns", AGENTS, RUN)
    assert after is not None and after["metadata"]["uid"] == run["metadata"]["uid"]
    assert after["status"]["phase"] == run["status"]["phase"]
    _webhook_admits(kube, images["agent"].reference)

    # -- helm uninstall ----------------------------------------------------------------------
    helm(kube, "uninstall", RELEASE, "--namespace", SYSTEM, "--wait", "--timeout=120s")
    assert kube.get("apps/v1", "deployments", SYSTEM, f"{RELEASE}-agentsaga-operator") is None
    assert kube.get("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", None,
                    WEBHOOK) is None
    for crd in ("agentruns.agentsaga.io", "kopfpeerings.kopf.dev"):
        assert kube.get("apiextensions.k8s.io/v1", "customresourcedefinitions", None,
                        crd) is not None
    kept = kube.get(AR, "agentruns", AGENTS, RUN)
    assert kept is not None and kept["metadata"]["uid"] == run["metadata"]["uid"]
    assert _secrets(kube) == secrets
    assert _rows(database) == rows
