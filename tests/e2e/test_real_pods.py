"""The demo's incident, once, from pods: everything of agentsaga runs in its images on a real
node (kubelet, containerd, runc: `sagatest.cluster.node`), installed by `helm install`.

- The chart's hook Job runs `agentsaga migrate` in the sidecar image into an empty database;
  the operator runs as the chart's Deployment in the operator image, with the token its pod
  mounts; the API server calls the webhook through the chart's Service (a ClusterIP that
  kube-proxy routes to the operator's pod).
- An agent pod of the refund example (its agent image) gets the injected sidecar (the example's
  sidecar image), which the kubelet probes with native gRPC probes; the agent calls its tools
  through it, and the tools reach the stand-in vendors (the lab's world) on the node's address.
- Run one: the hold is placed, the plan waits at the pivot; a person approves it with `kubectl
  patch` (their own certificate); the receipt goes out once and the run succeeds.
- Run two: the hold is placed, then the pod is evicted through the Eviction API while the
  agent waits at the pivot: the kubelet kills its containers; the operator's unwind Job runs in
  the sidecar image and releases the hold; no receipt goes out.

The figures (helm install to a Ready agent pod with its sidecar; eviction to the Job's
completion) are printed and kept in `FIGURES` for the note.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentsaga_lab.world import World
from sagatest.chart_tools import CHART
from sagatest.cluster.chart import APPROVER_ROLE, bind_user, helm, person_kubeconfig
from sagatest.cluster.kube import Kube
from sagatest.cluster.node_cluster import NodeCluster
from sagatest.cluster.pod_images import PodImage, product_images, refund_sidecar

SYSTEM, AGENTS, RELEASE = "agentsaga-system", "refunds", "saga"
APPROVER = "dana"
AR = "agentsaga.io/v1alpha1"
Obj = dict[str, Any]
FIGURES: dict[str, float] = {}


@dataclass
class Installed:
    cluster: NodeCluster
    dsn: str
    world: World
    images: dict[str, PodImage]
    approver: Path
    notes: list[str] = field(default_factory=list)

    @property
    def kube(self) -> Kube:
        return self.cluster.kube


def _ready(pod: Obj | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _condition(obj: Obj | None, kind: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def database(pg_server: str) -> Iterator[str]:
    """An empty database of this module's (the chart's hook migrates it)."""
    name = f"realpods_{os.getpid()}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(pg_server)
    params["dbname"] = name
    yield make_conninfo(**params)  # type: ignore[arg-type]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def installed(node_cluster: NodeCluster, database: str) -> Iterator[Installed]:
    """The images on the node, the world on its address, the chart installed."""
    kube = node_cluster.kube
    started = time.monotonic()
    images = product_images()
    images["sidecar-refunds"] = refund_sidecar(images["sidecar"])
    FIGURES["images built or found (s)"] = time.monotonic() - started
    for image in images.values():
        node_cluster.node.load_image(image.archive, image.reference)
    with World(host=node_cluster.address) as world:
        pod_dsn = node_cluster.dsn_for_pods(database)
        for namespace in (SYSTEM, AGENTS):
            kube.create({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": namespace}})
        location = conninfo_to_dict(pod_dsn)
        where = f"{location['host']}:{location['port']}/{location['dbname']}"
        for secret, user in (("agentsaga-postgres-operator", "agentsaga_operator"),
                             ("agentsaga-postgres-migrate", location.get("user") or "postgres")):
            kube.create({"apiVersion": "v1", "kind": "Secret",
                         "metadata": {"name": secret, "namespace": SYSTEM},
                         "data": {"dsn": base64.b64encode(
                             f"postgresql://{user}@{where}".encode()).decode()}})
        sidecar, operator = images["sidecar-refunds"], images["operator"]
        helm_started = time.monotonic()
        install = functools.partial(
            helm, kube, "install", RELEASE, str(CHART), "--namespace", SYSTEM,
            # until the operator's pod is Ready: the webhook's Service routes to it only then
            "--wait", "--timeout=150s",
             "--set", f"sidecar.namespaces={{{AGENTS}}}",
             "--set", f"postgres.credentials.location=postgresql://{where}",
             "--set", f"operator.image.repository={operator.repository}",
             "--set", f"operator.image.tag={operator.tag}",
             "--set", "operator.image.pullPolicy=Never",
             "--set", "operator.replicas=1",
             "--set", f"sidecar.image.repository={sidecar.repository}",
             "--set", f"sidecar.image.tag={sidecar.tag}",
             "--set", "sidecar.image.pullPolicy=Never",
             "--set", "sidecar.tools={refund_tools}",
             "--set", "sidecar.listen=0.0.0.0:50051",
             "--set", "sidecar.probe.type=grpc",
             "--set", "sidecar.extraEnv[0].name=EXAMPLE_WORLD_URL",
             "--set", f"sidecar.extraEnv[0].value={world.url}",
             "--set", "sidecar.extraEnv[1].name=AGENTSAGA_RECHECK_PAUSE_S",
             "--set", "sidecar.extraEnv[1].value=0.2",
             "--set", "operator.extraArgs={--resync-interval=1}")
        try:
            install()
        except (AssertionError, subprocess.TimeoutExpired) as failed:
            raise AssertionError(f"{failed}\n{node_cluster.node.pod_logs()}") from None
        FIGURES["helm install, its migration Job included (s)"] = (
            time.monotonic() - helm_started)
        bind_user(kube, AGENTS, f"{APPROVER}-approves", "ClusterRole", APPROVER_ROLE,
                  APPROVER)
        wait_for_the_webhook(kube, agent_pod_for(images["agent"], "webhook-probe", "probe"))
        found = Installed(node_cluster, database, world, images,
                          person_kubeconfig(kube, APPROVER))
        found.notes.append(f"helm_started={helm_started}")
        FIGURES["_helm_started"] = helm_started
        yield found


def wait_for_the_webhook(kube: Kube, pod: Obj, timeout: float = 60.0) -> None:
    """Until the API server reaches the operator's webhook through its Service: a server-side
    dry run of an agent pod's creation, which the webhook must admit (kube-proxy programs the
    Service's rules a moment after the operator's pod is Ready)."""
    deadline = time.monotonic() + timeout
    while True:
        tried = kube.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                             input=json.dumps(pod))
        if tried.returncode == 0:
            assert "agentsaga-sidecar" in tried.stdout, tried.stdout
            return
        assert "failed calling webhook" in tried.stderr, tried.stderr
        assert time.monotonic() < deadline, f"the webhook is not served: {tried.stderr}"
        time.sleep(0.2)


def agent_pod(installed: Installed, name: str, run: str) -> Obj:
    return agent_pod_for(installed.images["agent"], name, run)


def agent_pod_for(agent: PodImage, name: str, run: str) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": AGENTS,
                     "labels": {"agentsaga.io/inject": "true", "agentsaga.io/run": run},
                     "annotations": {"agentsaga.io/run-id": run}},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "serviceAccountName": "agentsaga-sidecar",
            "containers": [{
                "name": "agent", "image": agent.reference, "imagePullPolicy": "Never",
                "args": [run],
                "env": [{"name": "AGENTSAGA_ADDRESS", "value": "127.0.0.1:50051"},
                        {"name": "AGENTSAGA_ACCESS_TOKEN_FILE",
                         "value": "/var/run/secrets/agentsaga/access/token"}],
                "volumeMounts": [{"name": "agentsaga-access-token", "readOnly": True,
                                  "mountPath": "/var/run/secrets/agentsaga/access"}],
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }


def wait_run(kube: Kube, name: str, predicate: Any, timeout: float = 90.0) -> Obj:
    found = kube.wait_for(AR, "agentruns", AGENTS, name,
                          lambda o: o is not None and bool(predicate(o)), timeout)
    assert found is not None
    return found


def _phase(phase: str) -> Any:
    return lambda o: (o.get("status") or {}).get("phase") == phase


def test_the_incident_from_pods(installed: Installed) -> None:
    kube, node = installed.kube, installed.cluster.node
    world = installed.world

    # the operator's pod is Ready (its liveness answers) and serves the webhook: the agent pod
    # is admitted with the sidecar injected
    kube.create(agent_pod(installed, "refund-agent-1", "refund-1"))
    try:
        pod = kube.wait_for("v1", "pods", AGENTS, "refund-agent-1", _ready, timeout=180)
    except TimeoutError as failed:
        raise AssertionError(f"{failed}\n{node.pod_logs()}") from None
    FIGURES["helm install to a Ready agent pod with its sidecar (s)"] = (
        time.monotonic() - FIGURES["_helm_started"])
    assert pod is not None
    [sidecar] = pod["spec"]["initContainers"]
    assert sidecar["name"] == "agentsaga-sidecar" and sidecar["restartPolicy"] == "Always"
    assert sidecar["readinessProbe"]["grpc"] == {"port": 50051, "service": ""} or (
        sidecar["readinessProbe"]["grpc"]["port"] == 50051)
    statuses = {s["name"]: s for s in pod["status"]["initContainerStatuses"]
                + pod["status"]["containerStatuses"]}
    assert statuses["agentsaga-sidecar"]["ready"] and statuses["agentsaga-sidecar"]["started"]
    assert statuses["agent"]["ready"]

    # run one: to the pivot, approved by a person with kubectl, then the receipt once
    staged = wait_run(kube, "refund-1", _phase("AwaitingApproval"))
    plan_hash = staged["status"]["pivot"]["planHash"]
    approved = kube.kubectl("patch", "agentrun", "refund-1", "-n", AGENTS,
                            "--subresource=status", "--type=merge", "-p", json.dumps(
                                {"status": {"approval": {"planHash": plan_hash,
                                                         "decision": "Approved",
                                                         "approver": APPROVER}}}),
                            kubeconfig=installed.approver)
    assert approved.returncode == 0, approved.stderr
    done = wait_run(kube, "refund-1", _phase("Succeeded"))
    assert done["status"]["pivot"]["decidedBy"] == APPROVER
    finished = kube.wait_for("v1", "pods", AGENTS, "refund-agent-1",
                             lambda p: (p or {}).get("status", {}).get("phase") == "Succeeded",
                             timeout=60)
    assert finished is not None
    log = node.container_log(AGENTS, "refund-agent-1", "agent")
    assert "run refund-1 succeeded: the receipt went out once" in log, log
    truth = world.truth()
    assert [e["subject"] for e in truth["emails"]] == ["Your order 1182"], truth["emails"]
    [hold] = truth["payment_intents"]
    assert hold["status"] == "requires_capture", hold  # the approved run keeps its hold

    # run two: evicted at the pivot; the operator's Job unwinds it in the sidecar image
    kube.create({"apiVersion": AR, "kind": "AgentRun",
                 "metadata": {"name": "refund-2", "namespace": AGENTS},
                 "spec": {"agent": "refund-example", "onOrphan": "unwind",
                          "orphanGracePeriodSeconds": 1}})
    kube.create(agent_pod(installed, "refund-agent-2", "refund-2"))
    wait_run(kube, "refund-2", _phase("AwaitingApproval"))
    evicted_at = time.monotonic()
    kube.evict(AGENTS, "refund-agent-2")
    kube.wait_for("v1", "pods", AGENTS, "refund-agent-2", lambda p: p is None, timeout=60)
    jobs: list[Obj] = []
    deadline = time.monotonic() + 90
    while not jobs:
        jobs = kube.objects("batch/v1", "jobs", AGENTS)
        assert time.monotonic() < deadline, "no unwind Job"
        time.sleep(0.2)
    [job] = jobs
    complete = kube.wait_for("batch/v1", "jobs", AGENTS, job["metadata"]["name"],
                             lambda j: _condition(j, "Complete") or _condition(j, "Failed"),
                             timeout=120)
    FIGURES["eviction to the unwind Job Complete (s)"] = time.monotonic() - evicted_at
    assert _condition(complete, "Complete"), complete
    unwound = wait_run(kube, "refund-2", _phase("Unwound"))
    assert unwound["status"]["steps"]["compensated"] == 1  # the hold; the quote is pure
    truth = world.truth()
    holds = sorted(i["status"] for i in truth["payment_intents"])
    assert holds == ["canceled", "requires_capture"], truth["payment_intents"]
    assert len(truth["emails"]) == 1  # the evicted run's receipt never went out
    print("figures:", json.dumps({k: round(v, 1) for k, v in FIGURES.items()
                                  if not k.startswith("_")}))
