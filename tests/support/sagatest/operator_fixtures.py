"""The operator end to end: `agentsaga operator` (real kopf) in a subprocess against a real
control plane (kube-apiserver, etcd, the controller-manager's Job, garbage-collection and
disruption controllers, the scheduler) with the chart installed by `helm install`, a real
Postgres, real sidecars bound to real pods, and a real node (`sagatest.cluster.node`: kubelet,
containerd, runc) that runs the pods the scheduler puts on it: a Job's `agentsaga
reconcile`/`unwind` runs in the product's sidecar image (the test tools' module mounted from
tests/support), and its exit code completes or fails the Job through the real Job controller;
agent pods run the node's pause image (what matters of them here is that they exist, run and
get evicted; their sidecars are processes of the test, bound to them by the pod's identity).
Pods reach the test's Postgres on the node's address, through a forwarder.

`cluster` yields a `Cluster`: that control plane with `default` as the agent namespace, a
Postgres with the ledger tools' tables, the DSN Secret, a sidecar template (as the chart
renders it), and helpers. Each test gets a cluster of its own (a node's start and the chart's
install, about 15 s), except in a module marked `one_cluster_per_module`: its tests change
nothing outside `default`, so they share one, and what each made there (AgentRuns, Jobs, pods,
the DSN Secret naming its database) is deleted after it.

Everyone talks to the API server as themselves: the operator with a TokenRequest token of the
chart's operator ServiceAccount (every test shows the chart grants it enough: nothing it sent
was refused), approvals by `APPROVER` with a client certificate and a RoleBinding of the chart's
approver ClusterRole in `default` (`cluster.approver_kubectl`); the test's own client
(`cluster.kube`) is the cluster's admin, for what a test sets up (pods, Secrets, evictions).
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentsaga import subprocesses
from agentsaga.keys import log_run_id
from agentsaga.store import Run, SagaLog, roles
from agentsaga.store.connections import with_user
from sagatest import ledger_tools
from sagatest.cluster.chart import (
    APPROVER_ROLE,
    OPERATOR,
    bind_user,
    install_chart,
    operator_kubeconfig,
    person_kubeconfig,
)
from sagatest.cluster.kube import Kube, object_path
from sagatest.cluster.node import NAME as NODE
from sagatest.cluster.node import PAUSE_IMAGE, Node
from sagatest.cluster.node_cluster import NodeCluster, node_cluster_running
from sagatest.cluster.pod_images import product_images
from sagatest.sidecar_fixtures import ROOT, SidecarProcess, start_sidecar

__all__ = ["APPROVER", "Cluster", "JobResult", "OperatorProcess", "cluster",
           "namespaced_cluster"]

AR = "agentsaga.io/v1alpha1"
TOOLS = "sagatest.ledger_tools"
SECRET = "agentsaga-postgres"
SUPPORT = ROOT / "tests" / "support"
"""Mounted into the Jobs' pods (read-only), so that their tools module `sagatest.ledger_tools`
imports there as it does in the test's processes."""
APPROVER = "alice"
"""The user the fixture binds to the chart's approver ClusterRole in `default`."""
Obj = dict[str, Any]


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path

    def kill(self) -> None:
        """SIGKILL: no cleanup, no goodbye (a node loss, an OOM kill)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        subprocesses.stop(self.proc)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 20.0) -> None:
        """Until the operator printed `text`; fails after `timeout` seconds with its output."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert time.monotonic() < deadline, (
                f"the operator never printed {text!r}:\n" + self.output()[-3000:])
            time.sleep(0.1)


@dataclass(frozen=True)
class JobResult:
    """How a Job's pod ended, as the kubelet reported it: its exit code and its output."""

    name: str
    returncode: int
    output: str
    succeeded: bool
    """The Job's own verdict (condition Complete, not Failed), from the Job controller."""


def logged(run_id: str) -> str:
    """The saga-log id of a run of these tests' pods (namespace `default`)."""
    return log_run_id("default", run_id)


@dataclass
class Cluster:
    kube: Kube
    node: Node
    dsn: str
    """The database as the test's processes reach it (the operator, the sidecars)."""
    pod_dsn: str
    """The same database as pods reach it (the node's address, a forwarder)."""
    workdir: Path
    template: Path
    operator_kubeconfig: Path
    approver_kubeconfig: Path
    sidecar_image: str
    first_request: int = 0
    """The audit log's requests before this test's (its cluster may have served others)."""
    operators: list[OperatorProcess] = field(default_factory=list)
    sidecars: list[SidecarProcess] = field(default_factory=list)

    # -- the operator ----------------------------------------------------------------------

    def start_operator(self, *extra: str, env: dict[str, str] | None = None,
                       resync: float = 0.2, wait: bool = True) -> OperatorProcess:
        seen = len(self.kube.requests)
        log_path = self.workdir / f"operator-{len(self.operators)}.log"
        full_env = {**self.kube.env(self.operator_kubeconfig),
                    "AGENTSAGA_SIDECAR_TEMPLATE": str(self.template),
                    "AGENTSAGA_JOB_SERVICE_ACCOUNT": "agentsaga-sidecar", **(env or {})}
        with log_path.open("wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agentsaga.cli", "operator", "--dsn",
                 with_user(self.dsn, roles.OPERATOR),
                 "--resync-interval", str(resync), "--watch-timeout", "20", *extra],
                stdout=sink, stderr=subprocess.STDOUT, env=full_env, cwd=ROOT)
        process = OperatorProcess(proc, log_path)
        self.operators.append(process)
        if wait:
            self._wait_watching(process, seen, ("/agentruns", "/pods", "/jobs"))
        return process

    def _wait_watching(self, process: OperatorProcess, seen: int, paths: tuple[str, ...],
                       timeout: float = 60.0) -> None:
        """Until kopf has opened its watches (the API server's audit log has them)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.proc.poll() is not None:
                raise RuntimeError("the operator exited:\n" + process.output())
            watched = {r.path for r in self.kube.requests[seen:]
                       if r.verb == "watch" and r.user_agent.startswith("kopf")}
            if all(any(p.endswith(suffix) for p in watched) for suffix in paths):
                return
            time.sleep(0.05)
        raise TimeoutError("the operator did not start watching:\n" + process.output())

    # -- people ----------------------------------------------------------------------------

    def approver_kubectl(self, *args: str,
                         input: str | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl as `APPROVER`, with their own client certificate."""
        return self.kube.kubectl(*args, input=input, kubeconfig=self.approver_kubeconfig)

    # -- agent pods and their sidecars -----------------------------------------------------

    def create_pod(self, name: str, run: str) -> Obj:
        """An agent pod of run `run` in `default` (the node's pause image), once Running."""
        self.kube.create({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"agentsaga.io/run": run}},
            "spec": {"containers": [{"name": "agent", "image": PAUSE_IMAGE,
                                     "imagePullPolicy": "Never"}],
                     "terminationGracePeriodSeconds": 5},
        })
        running = self.kube.wait_for("v1", "pods", "default", name, _running, timeout=30)
        assert running is not None
        return running

    def start_sidecar(self, pod: Obj, env: dict[str, str] | None = None,
                      tools: str = TOOLS) -> SidecarProcess:
        meta = pod["metadata"]
        # no Kubernetes credentials (no KUBECONFIG): the sidecar writes only to the saga log,
        # as its own database role
        env = {"LEDGER_DSN": self.dsn, "AGENTSAGA_POD_NAME": meta["name"],
               "AGENTSAGA_POD_NAMESPACE": meta["namespace"], "AGENTSAGA_POD_UID": meta["uid"],
               **(env or {})}
        # the pod's namespace's own credential: Postgres shows it that namespace's runs only
        with psycopg.connect(self.dsn) as conn:
            role = roles.provision(conn, meta["namespace"])["sidecar"]
        sidecar = start_sidecar(with_user(self.dsn, role), tools,
                                env={**env, "KUBECONFIG": "/nonexistent"})
        self.sidecars.append(sidecar)
        return sidecar

    # -- AgentRuns and Jobs ----------------------------------------------------------------

    def apply_agentrun(self, name: str, **spec: Any) -> None:
        """`kubectl apply` an AgentRun, as a human would (spec `agent: refunder` unless given)."""
        manifest = {"apiVersion": AR, "kind": "AgentRun",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"agent": "refunder", **spec}}
        applied = self.kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        assert applied.returncode == 0, applied.stderr

    def write_status_as_operator(self, name: str, status: Obj,
                                 namespace: str = "default") -> None:
        """Merge-patch an AgentRun's status with the operator's own credentials: the one
        identity the approval policy exempts. What an earlier operator wrote, or what got
        past the policy (stolen credentials, a binding in Warn mode), which the operator must
        then judge on its own."""
        patched = self.kube.kubectl("patch", "agentrun", name, "-n", namespace,
                                    "--subresource=status", "--type=merge",
                                    "-p", json.dumps({"status": status}),
                                    kubeconfig=self.operator_kubeconfig)
        assert patched.returncode == 0, patched.stderr

    def agentrun(self, name: str) -> Obj | None:
        return self.kube.get(AR, "agentruns", "default", name)

    def wait_run(self, name: str, predicate: Callable[[Obj], bool],
                 timeout: float = 20.0) -> Obj:
        found = self.kube.wait_for(AR, "agentruns", "default", name,
                                   lambda o: o is not None and predicate(o), timeout)
        assert found is not None
        return found

    def wait_log(self, run_id: str, predicate: Callable[[Run], bool],
                 timeout: float = 20.0) -> Run:
        """The run as the saga log has it, once `predicate` holds (a deadline, never a sleep)."""
        deadline = time.monotonic() + timeout
        with SagaLog(self.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
            while True:
                run = saga_log.run(logged(run_id))
                if run is not None and predicate(run):
                    return run
                assert time.monotonic() < deadline, f"run {run_id}: {run}"
                time.sleep(0.05)

    def wait_phase(self, name: str, phase: str, timeout: float = 20.0) -> Obj:
        return self.wait_run(name, lambda o: (o.get("status") or {}).get("phase") == phase,
                             timeout)

    def jobs(self) -> list[Obj]:
        return self.kube.objects("batch/v1", "jobs", "default")

    def wait_jobs(self, count: int, timeout: float = 20.0) -> list[Obj]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.jobs()
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise TimeoutError(f"expected {count} job(s), have {self.jobs()}")

    def create_job(self, name: str, *command: str) -> Obj:
        """A Job of the test's own (not the operator's), built as the operator builds its Jobs
        from the sidecar template: `command` in the sidecar's image, once (no retries)."""
        template = sidecar_template(self.sidecar_image)
        container = {k: v for k, v in template["container"].items()
                     if k not in ("restartPolicy", "readinessProbe", "args")}
        created: Obj = self.kube.create({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "serviceAccountName": "agentsaga-sidecar",
                "volumes": template["volumes"],
                "containers": [{**container, "name": "job", "command": list(command)}]}}}})
        return created

    def job_result(self, job: Obj, timeout: float = 60.0) -> JobResult:
        """Once the Job controller has marked Job `job` Complete or Failed: how its last pod
        ended (its container's exit code as the kubelet reported it, and what it printed)."""
        name = job["metadata"]["name"]
        try:
            done = self.kube.wait_for("batch/v1", "jobs", "default", name, _finished, timeout)
        except TimeoutError as failed:  # with what the node ran, and the pods' states
            seen = [(p["metadata"]["name"], (p.get("status") or {}).get("containerStatuses"))
                    for p in self.kube.objects("v1", "pods", "default")]
            raise TimeoutError(f"{failed}\npods: {seen}\n"
                               f"{self.node.pod_logs('default')}") from None
        assert done is not None
        pods = [p for p in self.kube.objects("v1", "pods", "default")
                if (p["metadata"].get("labels") or {}).get("job-name") == name]
        assert pods, f"Job {name} finished without a pod"
        pod = max(pods, key=lambda p: p["metadata"]["creationTimestamp"])
        states = [c.get("state", {}).get("terminated") for c in
                  (pod.get("status") or {}).get("containerStatuses") or []]
        codes = [int(t["exitCode"]) for t in states if t]
        assert codes, f"the pod of Job {name} has no exit code: {pod.get('status')}"
        return JobResult(name, max(codes),
                         self.node.container_log("default", pod["metadata"]["name"]),
                         _condition(done, "Complete"))

    @contextlib.contextmanager
    def holding_pods(self) -> Iterator[None]:
        """While inside, no new pod starts: the node is cordoned (unschedulable), so a pod
        created meanwhile waits, Pending, as for a slow image pull; what runs keeps running.
        For a test that must look at the cluster between a Job's creation and its pod's
        start, whatever the machine's speed."""
        cordoned = self.kube.kubectl("cordon", NODE)
        assert cordoned.returncode == 0, cordoned.stderr
        try:
            yield
        finally:
            uncordoned = self.kube.kubectl("uncordon", NODE)
            assert uncordoned.returncode == 0, uncordoned.stderr

    def refused_to_the_operator(self) -> list[str]:
        """Every request the operator sent that the API server refused (403): what the chart
        does not grant it. Not those answered while the API server was starting: it refuses
        everything until its authorizer has read the RBAC objects, whatever the chart grants;
        nor the test's own kubectl calls with the operator's credentials (asserting refusals)."""
        return [f"{r.method} {r.path}?{r.query}" for r in self.kube.requests[self.first_request:]
                if r.user == OPERATOR and r.status == 403
                and not r.user_agent.startswith("kubectl")
                and not self.kube.plane.was_starting(r.received)]

    def close(self) -> None:
        for operator in self.operators:
            operator.kill()
        for sidecar in self.sidecars:
            sidecar.stop()


def _running(pod: Obj | None) -> bool:
    return pod is not None and (pod.get("status") or {}).get("phase") == "Running"


def _condition(obj: Obj, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _finished(job: Obj | None) -> bool:
    return job is not None and (_condition(job, "Complete") or _condition(job, "Failed"))


def sidecar_template(image: str) -> Obj:
    """The container the chart renders into AGENTSAGA_SIDECAR_TEMPLATE (what matters here), in
    the product's sidecar `image`, with the test tools' module mounted from tests/support."""
    secret = {"secretKeyRef": {"name": SECRET, "key": "dsn"}}
    return {
        "container": {
            "name": "agentsaga-sidecar", "image": image, "imagePullPolicy": "Never",
            "args": ["sidecar"], "restartPolicy": "Always",
            "env": [{"name": "AGENTSAGA_DSN", "valueFrom": secret},
                    {"name": "LEDGER_DSN", "valueFrom": secret},
                    {"name": "AGENTSAGA_TOOLS", "value": TOOLS},
                    {"name": "AGENTSAGA_RECHECK_PAUSE_S", "value": "0.05"},
                    {"name": "PYTHONPATH", "value": "/opt/sagatest"}],
            "volumeMounts": [{"name": "agentsaga-sidecar-tmp", "mountPath": "/tmp"},
                             {"name": "sagatest", "mountPath": "/opt/sagatest",
                              "readOnly": True}],
            "readinessProbe": {"exec": {"command": ["true"]}},
        },
        "volumes": [{"name": "agentsaga-sidecar-tmp", "emptyDir": {}},
                    {"name": "sagatest", "hostPath": {"path": str(SUPPORT),
                                                      "type": "Directory"}}],
    }


ALL_NAMESPACES = ("--set", "operator.watchAllNamespaces=true")
"""The chart values of the operator's `cluster`: its RBAC cluster-wide."""

SHARED = "one_cluster_per_module"
"""The mark of a module whose tests share one cluster (`cluster`)."""


@dataclass
class _Installed:
    """A node cluster with the sidecar's image and the chart installed, and its people."""

    running: NodeCluster
    sidecar_image: str
    operator_kubeconfig: Path
    approver_kubeconfig: Path


@contextlib.contextmanager
def _installed(chart_values: tuple[str, ...] = ()) -> Iterator[_Installed]:
    sidecar_image = product_images()["sidecar"]
    with node_cluster_running() as running:
        kube = running.kube
        running.node.load_image(sidecar_image.archive, sidecar_image.reference)
        install_chart(kube, ["default"], *chart_values)
        bind_user(kube, "default", f"{APPROVER}-approves", "ClusterRole", APPROVER_ROLE,
                  APPROVER)
        yield _Installed(running, sidecar_image.reference, operator_kubeconfig(kube),
                         person_kubeconfig(kube, APPROVER))


@pytest.fixture(scope="module")
def module_cluster() -> Iterator[_Installed]:
    """One installed cluster for the tests of a module marked `one_cluster_per_module`."""
    with _installed(ALL_NAMESPACES) as installed:
        yield installed


@pytest.fixture
def cluster(pg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The operator's RBAC cluster-wide (`operator.watchAllNamespaces`; the chart's default
    watches its own namespaces only): start it without `--namespace`. A cluster of the test's
    own; in a module marked `one_cluster_per_module`, the module's (its tests change nothing
    outside `default`, and what they made there is deleted after each)."""
    if _module_marked(request):
        installed: _Installed = request.getfixturevalue("module_cluster")
        yield from _cluster(installed, pg, tmp_path, monkeypatch, shared=True)
        return
    with _installed(ALL_NAMESPACES) as installed:
        yield from _cluster(installed, pg, tmp_path, monkeypatch)


def _module_marked(request: pytest.FixtureRequest) -> bool:
    """The module (never a single test: the module's cluster holds the machine's one node
    until the module ends, so a test of its own there would wait for it forever) is marked
    `one_cluster_per_module`."""
    marks = getattr(request.module, "pytestmark", [])
    return any(m.name == SHARED for m in (marks if isinstance(marks, list) else [marks]))


@pytest.fixture
def namespaced_cluster(pg: str, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """The chart with `operator.watchNamespaces={default}`: the operator's role bound in
    `default` only, its KopfPeering there; start it with `--namespace default`."""
    with _installed(("--set", "operator.watchNamespaces={default}")) as installed:
        yield from _cluster(installed, pg, tmp_path, monkeypatch)


def _cluster(installed: _Installed, pg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             *, shared: bool = False) -> Iterator[Cluster]:
    ledger_tools.setup(pg)
    # the ledger tools reach the ledger wherever they run: the sidecars (their environment),
    # the Jobs' pods (the Secret: the node's address) and this process, where tests unwind
    # runs in-process
    monkeypatch.setenv("LEDGER_DSN", pg)
    running = installed.running
    kube = running.kube
    first_request = len(kube.requests)
    pod_dsn = running.dsn_for_pods(pg)  # this test's database
    kube.create({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": "default"},
        "data": {"dsn": base64.b64encode(pod_dsn.encode()).decode()},
    })
    template = tmp_path / "sidecar.json"
    template.write_text(json.dumps(sidecar_template(installed.sidecar_image)))
    found = Cluster(kube, running.node, pg, pod_dsn, tmp_path, template,
                    installed.operator_kubeconfig, installed.approver_kubeconfig,
                    installed.sidecar_image, first_request)
    try:
        yield found
    finally:
        found.close()
        if shared:
            _clear_default(kube)
    # every test shows the chart grants the operator what it does
    assert found.refused_to_the_operator() == [], "the chart's RBAC refused the operator"


CLEARED = (("agentsaga.io/v1alpha1", "agentruns"), ("batch/v1", "jobs"), ("v1", "pods"))
"""What the tests of a shared cluster make in `default`, deleted after each (and the DSN's
Secret, which names the test's database)."""


def _clear_default(kube: Kube, timeout: float = 60.0) -> None:
    """Delete the objects a test made in `default` and wait until they are gone: AgentRuns
    without waiting for an operator (their finalizers dropped; the test's operators are
    stopped), Jobs with their pods, pods at once (their containers killed by the kubelet)."""
    for run in kube.objects(AR, "agentruns", "default"):
        if run["metadata"].get("finalizers"):
            kube.patch(AR, "agentruns", "default", run["metadata"]["name"],
                       {"metadata": {"finalizers": None}})
    for api_version, plural in CLEARED:
        query = {"propagationPolicy": "Background"} if plural == "jobs" else None
        kube.call("DELETE", object_path(api_version, plural, "default"),
                  {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
                  query=query)
    kube.delete("v1", "secrets", "default", SECRET)
    deadline = time.monotonic() + timeout
    while True:
        left = [f"{plural}/{o['metadata']['name']}" for api_version, plural in CLEARED
                for o in kube.objects(api_version, plural, "default")]
        if kube.get("v1", "secrets", "default", SECRET) is not None:
            left.append(f"secrets/{SECRET}")
        if not left:
            return
        assert time.monotonic() < deadline, f"left in default after the test: {left}"
        time.sleep(0.1)


def agentrun(name: str, *, grace: int, on_orphan: str = "unwind") -> dict[str, object]:
    return {"apiVersion": AR, "kind": "AgentRun",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"agent": "refunder", "onOrphan": on_orphan,
                     "orphanGracePeriodSeconds": grace}}


def evict(cluster: Cluster, pod: str) -> None:
    """Through the real eviction subresource; the kubelet then stops the pod's containers and
    the pod goes."""
    cluster.kube.evict("default", pod)
