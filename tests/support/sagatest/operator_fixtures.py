"""The operator end to end: `agentsaga operator` (real kopf) in a subprocess against the
Kubernetes API stand-in, real Postgres, real sidecars bound to stand-in pods.

`cluster` yields a `Cluster`: the stand-in with the CRDs, the rendered chart's RBAC and approval
policy (enforced, with `default` as the agent namespace), a Postgres with the ledger tools'
tables, the DSN Secret and a sidecar template (as the chart renders them), and helpers that do
what the missing kubelet and job controller would: run a Job's command, mark it complete.

The operator runs as the chart's operator ServiceAccount (`sagatest.chart_rbac`): every test
shows the chart grants it enough. The test's own client (`cluster.kube`) stays the stand-in's
admin for what a test sets up (pods, Secrets, evictions); approvals are given as `APPROVER`,
who holds the chart's approver ClusterRole in `default` (`cluster.approver_kubectl`).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from agentsaga import subprocesses
from agentsaga.keys import log_run_id
from agentsaga.store import Run, SagaLog, roles
from agentsaga.store.connections import with_user
from sagatest import ledger_tools
from sagatest.chart_rbac import (
    APPROVER_ROLE,
    bind_user,
    install_chart_rbac,
    operator_kubeconfig,
    operator_token,
)
from sagatest.kube_fixtures import Kube
from sagatest.sidecar_fixtures import ROOT, SidecarProcess, start_sidecar

__all__ = ["APPROVER", "Cluster", "OperatorProcess", "cluster",
           "namespaced_cluster"]

AR = "agentsaga.io/v1alpha1"
TOOLS = "sagatest.ledger_tools"
SECRET = "agentsaga-postgres"
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


def logged(run_id: str) -> str:
    """The saga-log id of a run of these tests' pods (namespace `default`)."""
    return log_run_id("default", run_id)


@dataclass
class Cluster:
    kube: Kube
    dsn: str
    workdir: Path
    template: Path
    operator_kubeconfig: Path
    operators: list[OperatorProcess] = field(default_factory=list)
    sidecars: list[SidecarProcess] = field(default_factory=list)

    # -- the operator ----------------------------------------------------------------------

    def start_operator(self, *extra: str, env: dict[str, str] | None = None,
                       resync: float = 0.2, wait: bool = True) -> OperatorProcess:
        seen = len(self.kube.requests)
        log_path = self.workdir / f"operator-{len(self.operators)}.log"
        full_env = {**self.kube.env(), "KUBECONFIG": str(self.operator_kubeconfig),
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
                       timeout: float = 30.0) -> None:
        """Until kopf has opened its watches (the stand-in saw the requests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.proc.poll() is not None:
                raise RuntimeError("the operator exited:\n" + process.output())
            watched = {r.path for r in self.kube.requests[seen:]
                       if "watch=true" in r.query and r.user_agent.startswith("kopf")}
            if all(any(p.endswith(suffix) for p in watched) for suffix in paths):
                return
            time.sleep(0.05)
        raise TimeoutError("the operator did not start watching:\n" + process.output())

    # -- people ----------------------------------------------------------------------------

    def approver_kubectl(self, *args: str,
                         input: str | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl as `APPROVER` (impersonated by the admin, as `kubectl --as` does)."""
        return self.kube.kubectl(f"--as={APPROVER}", *args, input=input)

    # -- agent pods and their sidecars -----------------------------------------------------

    def create_pod(self, name: str, run: str) -> Obj:
        self.kube.create({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"agentsaga.io/run": run}},
            "spec": {"containers": [{"name": "agent", "image": "example/agent:1"}]},
        })
        return self.kube.patch_status("v1", "pods", "default", name, {"phase": "Running"})

    def start_sidecar(self, pod: Obj, env: dict[str, str] | None = None,
                      tools: str = TOOLS) -> SidecarProcess:
        meta = pod["metadata"]
        # no Kubernetes credentials (no KUBECONFIG): the sidecar writes only to the saga log,
        # as its own database role
        env = {"LEDGER_DSN": self.dsn, "AGENTSAGA_POD_NAME": meta["name"],
               "AGENTSAGA_POD_NAMESPACE": meta["namespace"], "AGENTSAGA_POD_UID": meta["uid"],
               **(env or {})}
        sidecar = start_sidecar(with_user(self.dsn, roles.SIDECAR), tools,
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

    def run_job(self, job: Obj) -> subprocess.CompletedProcess[str]:
        """What the kubelet would do: run the Job's container command with its environment
        (Secret references resolved from the stand-in). `agentsaga` is this checkout's CLI."""
        container = job["spec"]["template"]["spec"]["containers"][0]
        command = list(container["command"]) + list(container.get("args") or [])
        assert command[0] == "agentsaga"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSAGA_")}
        for entry in container.get("env") or []:
            env[entry["name"]] = self._env_value(entry)
        return subprocess.run([sys.executable, "-m", "agentsaga.cli", *command[1:]], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=60)

    def _env_value(self, entry: Obj) -> str:
        if "value" in entry:
            return str(entry["value"])
        ref = entry["valueFrom"]["secretKeyRef"]
        secret = self.kube.get("v1", "secrets", "default", ref["name"])
        assert secret is not None, f"secret {ref['name']} is missing"
        return base64.b64decode(secret["data"][ref["key"]]).decode()

    def finish_job(self, name: str, succeeded: bool = True) -> None:
        """What the job controller would do once the pod exited."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        kind = "Complete" if succeeded else "Failed"
        status: Obj = {"conditions": [{"type": kind, "status": "True",
                                       "lastTransitionTime": stamp}],
                       "startTime": stamp, "active": 0}
        status["succeeded" if succeeded else "failed"] = 1
        if succeeded:
            status["completionTime"] = stamp
        self.kube.patch_status("batch/v1", "jobs", "default", name, status)

    def refused_to_the_operator(self) -> list[str]:
        """Every request the operator sent with its token that the stand-in refused (403): what
        the chart does not grant it (a test's own `kubectl --as` probes are not counted)."""
        token = f"Bearer {operator_token(self.kube)}"
        return [f"{r.method} {r.path}?{r.query}" for r in self.kube.requests
                if r.authorization == token and r.status == 403]

    def close(self) -> None:
        for operator in self.operators:
            operator.kill()
        for sidecar in self.sidecars:
            sidecar.stop()


def sidecar_template() -> Obj:
    """The container the chart renders into AGENTSAGA_SIDECAR_TEMPLATE (what matters here)."""
    secret = {"secretKeyRef": {"name": SECRET, "key": "dsn"}}
    return {
        "container": {
            "name": "agentsaga-sidecar", "image": "agentsaga-sidecar:test", "args": ["sidecar"],
            "restartPolicy": "Always",
            "env": [{"name": "AGENTSAGA_DSN", "valueFrom": secret},
                    {"name": "LEDGER_DSN", "valueFrom": secret},
                    {"name": "AGENTSAGA_TOOLS", "value": TOOLS},
                    {"name": "AGENTSAGA_RECHECK_PAUSE_S", "value": "0.05"}],
            "readinessProbe": {"exec": {"command": ["true"]}},
        },
        "volumes": [{"name": "agentsaga-sidecar-tmp", "emptyDir": {}}],
    }


@pytest.fixture
def cluster(kube_with_crds: Kube, pg: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """The operator's RBAC cluster-wide (the chart's default, `operator.watchNamespaces` empty):
    start it without `--namespace`."""
    yield from _cluster(kube_with_crds, pg, tmp_path, monkeypatch)


@pytest.fixture
def namespaced_cluster(kube_with_crds: Kube, pg: str, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """The chart with `operator.watchNamespaces={default}`: the operator's role bound in
    `default` only, its KopfPeering there; start it with `--namespace default`."""
    yield from _cluster(kube_with_crds, pg, tmp_path, monkeypatch,
                        ("--set", "operator.watchNamespaces={default}"), peering=True)


def _cluster(kube: Kube, pg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             chart_values: tuple[str, ...] = (), *, peering: bool = False) -> Iterator[Cluster]:
    ledger_tools.setup(pg)
    # the ledger tools reach the ledger wherever they run: the sidecars and Jobs (their
    # environment) and this process, where tests unwind runs in-process
    monkeypatch.setenv("LEDGER_DSN", pg)
    kube.create({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": "default"},
        "data": {"dsn": base64.b64encode(pg.encode()).decode()},
    })
    install_chart_rbac(kube, ["default"], *chart_values, peering=peering)
    bind_user(kube, "default", f"{APPROVER}-approves", "ClusterRole", APPROVER_ROLE, APPROVER)
    kube.enforce_admission_policies(True)
    template = tmp_path / "sidecar.json"
    template.write_text(json.dumps(sidecar_template()))
    found = Cluster(kube, pg, tmp_path, template, operator_kubeconfig(kube))
    try:
        yield found
    finally:
        found.close()
    # every test shows the chart grants the operator what it does
    assert found.refused_to_the_operator() == [], "the chart's RBAC refused the operator"


def agentrun(name: str, *, grace: int, on_orphan: str = "unwind") -> dict[str, object]:
    return {"apiVersion": AR, "kind": "AgentRun",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"agent": "refunder", "onOrphan": on_orphan,
                     "orphanGracePeriodSeconds": grace}}


def evict(cluster: Cluster, pod: str) -> None:
    """Through the eviction subresource, with the real Python client."""
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(cluster.kube.kubeconfig))
    try:
        client.CoreV1Api(api).create_namespaced_pod_eviction(
            pod, "default",
            client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace="default")))
    finally:
        api.close()
