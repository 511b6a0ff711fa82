"""The stand-in against the real kubectl 1.37 (tools/bin/kubectl)."""

from __future__ import annotations

import subprocess
import time

from sagatest.kube_fixtures import CRDS, KUBECTL, Kube

AR = "agentsaga.io/v1alpha1"
CRD_FILE = str(CRDS / "agentruns.agentsaga.io.yaml")
RUN1 = """
apiVersion: agentsaga.io/v1alpha1
kind: AgentRun
metadata:
  name: run1
spec:
  agent: refunder
  runId: run-1
"""


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _columns(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()]


def _wait_until_watching(kube: Kube, name: str, timeout: float = 10.0) -> None:
    """Poll the request log until kubectl has opened its watch on `name`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any("watch=true" in r.query and f"metadata.name%3D{name}" in r.query
               for r in kube.requests):
            return
        time.sleep(0.02)
    raise TimeoutError("kubectl never watched")


def test_apply_crd_then_run_serves_it_with_printer_columns_and_defaults(kube: Kube) -> None:
    assert "created" in _ok(kube.kubectl("apply", "-f", CRD_FILE))
    assert "agentrun.agentsaga.io/run1 created" in _ok(kube.kubectl("apply", "-f", "-",
                                                                     input=RUN1))

    stored = kube.get(AR, "agentruns", "default", "run1")
    assert stored is not None
    assert stored["metadata"]["generation"] == 1
    assert stored["spec"] == {"agent": "refunder", "runId": "run-1", "onOrphan": "unwind",
                              "orphanGracePeriodSeconds": 60, "pivot": {"required": False},
                              "irreversibleBeforePivot": "refuse"}

    _ok(kube.kubectl("patch", "agentrun", "run1", "--subresource=status", "--type=merge", "-p",
                     '{"status":{"phase":"Running","steps":{"total":4,"unknown":1},'
                     '"pivot":{"state":"AwaitingApproval"},"awaitingHuman":"3"}}'))
    header, row = _columns(_ok(kube.kubectl("get", "agentruns")))
    assert header == ["NAME", "PHASE", "STEPS", "UNKNOWN", "PIVOT", "HUMAN", "AGE"]
    assert row[:6] == ["run1", "Running", "4", "1", "AwaitingApproval", "3"]
    assert row[6].endswith("s")

    by_short_name = _columns(_ok(kube.kubectl("get", "ar", "run1")))
    assert by_short_name[1][:2] == ["run1", "Running"]
    by_category = _columns(_ok(kube.kubectl("get", "agentsaga")))
    assert by_category[1][:2] == ["run1", "Running"]


def test_status_patch_keeps_generation_and_spec_apply_bumps_it(kube_with_crds: Kube) -> None:
    kube = kube_with_crds
    _ok(kube.kubectl("apply", "-f", "-", input=RUN1))
    _ok(kube.kubectl("patch", "ar", "run1", "--subresource=status", "--type=merge",
                     "-p", '{"status":{"phase":"Running"},"spec":{"agent":"ignored"}}'))
    after_status = kube.get(AR, "agentruns", "default", "run1")
    assert after_status is not None
    assert after_status["metadata"]["generation"] == 1
    assert after_status["spec"]["agent"] == "refunder"  # /status ignores everything else

    _ok(kube.kubectl("apply", "-f", "-", input=RUN1.replace("refunder", "refunder-v2")))
    after_apply = kube.get(AR, "agentruns", "default", "run1")
    assert after_apply is not None
    assert after_apply["metadata"]["generation"] == 2
    assert after_apply["spec"]["agent"] == "refunder-v2"
    assert after_apply["status"] == {"phase": "Running"}  # main resource ignores status

    _ok(kube.kubectl("annotate", "ar", "run1", "example.com/note=x"))
    annotated = kube.get(AR, "agentruns", "default", "run1")
    assert annotated is not None
    assert annotated["metadata"]["generation"] == 2


def test_strategic_merge_patch_on_custom_resource_is_refused(kube_with_crds: Kube) -> None:
    _ok(kube_with_crds.kubectl("apply", "-f", "-", input=RUN1))
    result = kube_with_crds.kubectl("patch", "ar", "run1", "-p", '{"spec":{"agent":"x"}}')
    assert result.returncode == 1
    assert "application/strategic-merge-patch+json is not supported" in result.stderr
    stored = kube_with_crds.get(AR, "agentruns", "default", "run1")
    assert stored is not None and stored["spec"]["agent"] == "refunder"

    merged = kube_with_crds.kubectl("patch", "ar", "run1", "--type=merge",
                                    "-p", '{"spec":{"agent":"x"}}')
    assert merged.returncode == 0, merged.stderr
    stored = kube_with_crds.get(AR, "agentruns", "default", "run1")
    assert stored is not None and stored["spec"]["agent"] == "x"


def test_missing_object_is_a_not_found_status(kube_with_crds: Kube) -> None:
    result = kube_with_crds.kubectl("get", "agentrun", "nope")
    assert result.returncode == 1
    assert 'Error from server (NotFound): agentruns.agentsaga.io "nope" not found' in (
        result.stderr)


def test_wait_for_jsonpath_and_for_condition_set_later(kube_with_crds: Kube) -> None:
    kube = kube_with_crds
    _ok(kube.kubectl("apply", "-f", "-", input=RUN1))
    waiter = subprocess.Popen(
        [str(KUBECTL), "--kubeconfig", str(kube.kubeconfig), "wait", "agentrun/run1",
         "--for=condition=PivotApproved", "--timeout=20s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=kube.env())
    try:
        _wait_until_watching(kube, "run1")
        assert waiter.poll() is None  # not met yet
        kube.patch_status(AR, "agentruns", "default", "run1", {
            "phase": "Committing",
            "observedGeneration": 1,
            "conditions": [{"type": "PivotApproved", "status": "True", "observedGeneration": 1,
                            "reason": "ApprovedByUser", "message": "approved by alice",
                            "lastTransitionTime": "2026-12-02T15:00:00Z"}]})
        out, err = waiter.communicate(timeout=20)
    finally:
        waiter.kill()
    assert waiter.returncode == 0, err
    assert "agentrun.agentsaga.io/run1 condition met" in out

    jsonpath = kube.kubectl("wait", "ar/run1", "--for=jsonpath={.status.phase}=Committing",
                            "--timeout=10s")
    assert jsonpath.returncode == 0, jsonpath.stderr

    timed_out = kube.kubectl("wait", "ar/run1", "--for=jsonpath={.status.phase}=Succeeded",
                             "--timeout=1s")
    assert timed_out.returncode == 1
    assert "timed out" in timed_out.stderr


def test_condition_of_an_older_generation_does_not_satisfy_wait(kube_with_crds: Kube) -> None:
    kube = kube_with_crds
    _ok(kube.kubectl("apply", "-f", "-", input=RUN1))
    _ok(kube.kubectl("patch", "ar", "run1", "--type=merge", "-p", '{"spec":{"agent":"b"}}'))
    kube.patch_status(AR, "agentruns", "default", "run1", {
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1,
                        "reason": "Stale", "message": "",
                        "lastTransitionTime": "2026-12-02T15:00:00Z"}]})
    result = kube.kubectl("wait", "ar/run1", "--for=condition=Ready", "--timeout=1s")
    assert result.returncode == 1


def test_delete_with_finalizer_waits_for_its_removal(kube_with_crds: Kube) -> None:
    kube = kube_with_crds
    _ok(kube.kubectl("apply", "-f", "-", input=RUN1.replace(
        "  name: run1\n", "  name: run1\n  finalizers: [agentsaga.io/unsettled]\n")))
    result = kube.kubectl("delete", "ar", "run1", "--wait=false")
    assert result.returncode == 0, result.stderr
    pending = kube.get(AR, "agentruns", "default", "run1")
    assert pending is not None
    assert pending["metadata"]["deletionTimestamp"]

    adding = kube.kubectl("patch", "ar", "run1", "--type=json", "-p",
                          '[{"op":"add","path":"/metadata/finalizers/-","value":"other/x"}]')
    assert adding.returncode == 1
    assert "no new finalizers" in adding.stderr

    waiter = subprocess.Popen(
        [str(KUBECTL), "--kubeconfig", str(kube.kubeconfig), "wait", "ar/run1",
         "--for=delete", "--timeout=20s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=kube.env())
    try:
        _wait_until_watching(kube, "run1")
        kube.patch(AR, "agentruns", "default", "run1", {"metadata": {"finalizers": None}})
        out, err = waiter.communicate(timeout=20)
    finally:
        waiter.kill()
    assert waiter.returncode == 0, err
    assert kube.get(AR, "agentruns", "default", "run1") is None


def test_builtin_kinds_apply_get_and_delete(kube: Kube) -> None:
    manifest = """
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, labels: {app: agentsaga}}
data: {mode: strict}
---
apiVersion: batch/v1
kind: Job
metadata: {name: unwind-run1, labels: {app: agentsaga}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: unwind, image: example/agentsaga:1}]
"""
    _ok(kube.kubectl("apply", "-f", "-", input=manifest))
    _ok(kube.kubectl("apply", "-f", "-", input=manifest.replace("strict", "lenient")))
    cm = kube.get("v1", "configmaps", "default", "settings")
    assert cm is not None and cm["data"] == {"mode": "lenient"}
    names = _columns(_ok(kube.kubectl("get", "cm,jobs", "-l", "app=agentsaga", "-o", "name")))
    assert names == [["configmap/settings"], ["job.batch/unwind-run1"]]
    assert _columns(_ok(kube.kubectl("get", "jobs", "-l", "app!=agentsaga", "-o", "name"))) == []
    _ok(kube.kubectl("delete", "job", "unwind-run1"))
    assert kube.get("batch/v1", "jobs", "default", "unwind-run1") is None
