"""`kubectl agentsaga` with the real kubectl against a real API server: the runs table, the
staged plan, approve (by an approver, as themselves, through the real operator) and reject,
the trace; and the example approve script."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from sagatest.cluster.control_plane import ADMIN
from sagatest.cluster.kube import KUBECTL, ROOT, Kube
from sagatest.operator_fixtures import APPROVER, Cluster
from sagatest.plugin_tools import kubectl_agentsaga
from sagatest.staged_runs import RUN, staged_run

pytestmark = pytest.mark.one_cluster_per_module  # its `cluster` tests touch only `default`

APPROVE_SH = ROOT / "charts" / "agentsaga" / "examples" / "approve.sh"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CARD = "4242 4242 4242 4242"
LONG = "We are sorry for the delay; " * 4 + "Token evil.example/claim, password=hunter2."
"""Longer than any column: shown whole, its `Token ...` and `password=...` too."""


def test_runs_plan_and_approve_through_the_operator(cluster: Cluster) -> None:
    plan_hash = staged_run(cluster)
    kube = cluster.kube

    runs = kubectl_agentsaga(kube, "runs")
    assert runs.returncode == 0, runs.stderr
    header, row = runs.stdout.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "PHASE", "STEPS", "UNKNOWN", "PIVOT",
                              "CORRECTIONS", "AGE"]
    assert row.split()[:6] == ["default", RUN, "AwaitingApproval", "2", "0", "AwaitingApproval"]

    plan = kubectl_agentsaga(kube, "plan", RUN)
    assert plan.returncode == 0, plan.stderr
    assert f"plan hash {plan_hash}" in plan.stdout
    commit = plan.stdout.split("commit steps to approve:")[1].splitlines()
    assert commit[2].split()[:4] == ["0", "capture_charge", "compensatable", "finance"]
    assert commit[3].split()[:4] == ["1", "send_email", "irreversible", "customer"]

    assert (f"approve: kubectl agentsaga approve {RUN} --plan-hash {plan_hash} --reason '...'"
            in plan.stdout)
    approver = cluster.approver_kubeconfig
    unreviewed = kubectl_agentsaga(kube, "approve", RUN, "--reason", "plan reviewed",
                                   kubeconfig=approver)
    assert unreviewed.returncode == 2 and "--plan-hash" in unreviewed.stderr
    approved = kubectl_agentsaga(kube, "approve", RUN, "--plan-hash", plan_hash,
                                 "--reason", "plan reviewed", kubeconfig=approver)
    assert approved.returncode == 0, approved.stderr
    assert f"plan {plan_hash} Approved by {APPROVER}" in approved.stdout
    waited = kube.kubectl("wait", f"agentrun/{RUN}", "--for=condition=PivotApproved",
                          "--timeout=30s")
    assert waited.returncode == 0, waited.stderr
    pivot = cluster.wait_run(RUN, lambda o: "approval" not in o["status"])["status"]["pivot"]
    assert (pivot["decision"], pivot["decidedBy"], pivot["reason"]) == (
        "Approved", APPROVER, "plan reviewed")

    again = kubectl_agentsaga(kube, "approve", RUN, "--plan-hash", plan_hash,
                              kubeconfig=approver)
    assert again.returncode == 1
    assert "is not awaiting approval (pivot state: Approved); nothing was written" in (
        again.stderr)


def _staged_by_hand(kube: Kube, name: str) -> None:
    created = kube.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "agentsaga.io/v1alpha1", "kind": "AgentRun",
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {"agentsaga.io/traceparent": TRACEPARENT}},
        "spec": {"agent": "refunds"}}))
    assert created.returncode == 0, created.stderr
    status = {"status": {"phase": "AwaitingApproval", "pivot": {
        "state": "AwaitingApproval", "planHash": "9f2c41d7e0b3a6c5",
        "commit": [{"tool": "send_email", "class": "irreversible", "audience": ["customer"],
                    "args": {"to": "dana@example.com", "body": f"Refunded to {CARD}. {LONG}",
                             "api_token": "tok_live_123"}}]}}}
    patched = kube.kubectl("patch", "agentrun", name, "--subresource=status", "--type=merge",
                           "-p", json.dumps(status))
    assert patched.returncode == 0, patched.stderr


def test_plan_shows_arguments_whole_but_cards_and_reject_writes_the_current_hash(
        kube_with_crds: Kube) -> None:
    """The approver sees what they approve: every argument whole, card numbers masked to their
    last four (even in a status written by hand), nothing else hidden or cut."""
    kube = kube_with_crds
    _staged_by_hand(kube, "refund-77")
    plan = kubectl_agentsaga(kube, "plan", "refund-77", "-n", "default")
    assert plan.returncode == 0, plan.stderr
    assert CARD not in plan.stdout
    for argument in (f"body=Refunded to [card ****4242]. {LONG}", "to=dana@example.com",
                     "api_token=tok_live_123"):
        assert argument in plan.stdout, plan.stdout

    rejected = kubectl_agentsaga(kube, "reject", "refund-77", "--reason", "wrong customer")
    assert rejected.returncode == 0, rejected.stderr
    run = json.loads(kube.kubectl("get", "agentrun", "refund-77", "-o", "json").stdout)
    assert run["status"]["approval"] == {"planHash": "9f2c41d7e0b3a6c5", "decision": "Rejected",
                                         "approver": ADMIN, "reason": "wrong customer"}


def test_approve_refuses_a_plan_staged_again_after_the_review(kube_with_crds: Kube) -> None:
    """The approver reviewed plan H1; the agent then staged H2 (another recipient). Approving
    H1 writes nothing: the plugin never approves a plan its user did not review."""
    kube = kube_with_crds
    _staged_by_hand(kube, "refund-78")
    reviewed = kubectl_agentsaga(kube, "plan", "refund-78")
    assert "plan hash 9f2c41d7e0b3a6c5" in reviewed.stdout
    restaged = {"status": {"pivot": {
        "state": "AwaitingApproval", "planHash": "1111aaaa2222bbbb",
        "commit": [{"tool": "send_email", "class": "irreversible", "audience": ["customer"],
                    "args": {"to": "attacker@example.com", "body": "Refunded."}}]}}}
    patched = kube.kubectl("patch", "agentrun", "refund-78", "--subresource=status",
                           "--type=merge", "-p", json.dumps(restaged))
    assert patched.returncode == 0, patched.stderr

    approved = kubectl_agentsaga(kube, "approve", "refund-78", "--hash",
                                 "9f2c41d7e0b3a6c5", "--reason", "plan reviewed")
    assert approved.returncode == 1
    assert ("now awaits approval of plan 1111aaaa2222bbbb, not of plan 9f2c41d7e0b3a6c5 that "
            "you reviewed") in approved.stderr
    assert "kubectl agentsaga plan refund-78" in approved.stderr
    run = json.loads(kube.kubectl("get", "agentrun", "refund-78", "-o", "json").stdout)
    assert "approval" not in run["status"]  # nothing was written


def test_the_example_approve_script_approves_only_the_hash_reviewed(kube_with_crds: Kube) -> None:
    """charts/agentsaga/examples/approve.sh: without a hash it prints the plan and its hash and
    writes nothing; with the hash reviewed after the agent staged another plan, it refuses and
    writes nothing; with the staged hash it writes exactly that approval (no operator here:
    its wait for the decision times out)."""
    kube = kube_with_crds
    _staged_by_hand(kube, "refund-79")
    env = {**kube.env(), "PATH": os.pathsep.join([str(KUBECTL.parent), os.environ["PATH"]]),
           "APPROVE_WAIT": "1s"}

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", str(APPROVE_SH), "refund-79", "default", *args],
                              capture_output=True, text=True, timeout=60, env=env)

    shown = script()
    assert shown.returncode == 0, shown.stderr
    assert "plan hash: 9f2c41d7e0b3a6c5" in shown.stdout and "api_token" in shown.stdout
    restaged = {"status": {"pivot": {"planHash": "1111aaaa2222bbbb"}}}
    patched = kube.kubectl("patch", "agentrun", "refund-79", "--subresource=status",
                           "--type=merge", "-p", json.dumps(restaged))
    assert patched.returncode == 0, patched.stderr
    stale = script("9f2c41d7e0b3a6c5")
    assert stale.returncode == 1 and "Nothing was written" in stale.stderr
    run = json.loads(kube.kubectl("get", "agentrun", "refund-79", "-o", "json").stdout)
    assert "approval" not in run["status"]
    script("1111aaaa2222bbbb")  # its wait for the operator times out: none runs here
    run = json.loads(kube.kubectl("get", "agentrun", "refund-79", "-o", "json").stdout)
    assert run["status"]["approval"] == {"planHash": "1111aaaa2222bbbb", "decision": "Approved",
                                         "approver": ADMIN, "reason": "plan reviewed"}


def test_trace_prints_the_trace_id_and_links(kube_with_crds: Kube) -> None:
    _staged_by_hand(kube_with_crds, "traced-1")
    done = kubectl_agentsaga(kube_with_crds, "trace", "traced-1", "--jaeger",
                             "http://jaeger.example:16686")
    assert done.returncode == 0, done.stderr
    assert "trace id: 4bf92f3577b34da6a3ce929d0e0e4736" in done.stdout
    assert "http://jaeger.example:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736" in done.stdout
    missing = kubectl_agentsaga(kube_with_crds, "plan", "nobody")
    assert missing.returncode == 1 and "not found" in missing.stderr
