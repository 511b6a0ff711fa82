"""A step no lookup can settle, on Kubernetes: the agent is told NEEDS_HUMAN, the run's printer
columns show the step waiting for a person, the unwind Job stops for one (exit 3, no retry), an
approver settles the step with `kubectl patch` of status.settlements (by hand, and through
`kubectl agentsaga settle`) (real kubectl and kopf
against the API stand-in, real Postgres and sidecar), the operator records it once, refuses a
wrong step key with a condition, and starts the unwind again, which then finishes."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from agentsaga.cli.job_commands import NEEDS_HUMAN_EXIT
from agentsaga.client import ToolNeedsHuman
from agentsaga.operator.job_manifests import job_name
from agentsaga.store import SagaLog
from sagatest.cluster.control_plane import ADMIN
from sagatest.ledger_tools import add_fault, effects
from sagatest.operator_fixtures import Cluster, agentrun, evict, logged
from sagatest.plugin_tools import kubectl_agentsaga

Obj = dict[str, Any]
RUN = "sms-3001"
ADMISSION = "admissionregistration.k8s.io/v1"
EMAIL = {"to": "customer@example.com", "body": "Your refund is on its way."}


def settle(cluster: Cluster, step: int, **entry: str) -> None:
    body = {"status": {"settlements": {str(step): entry}}}
    patched = cluster.approver_kubectl("patch", "agentrun", RUN, "--subresource=status",
                                       "--type=merge", "-p", json.dumps(body))
    assert patched.returncode == 0, patched.stderr


def condition(run: Obj, type_: str) -> Obj | None:
    return next((c for c in run["status"].get("conditions") or [] if c["type"] == type_), None)


def test_an_approver_settles_a_step_with_kubectl_and_the_unwind_finishes(
        cluster: Cluster) -> None:
    manifest = agentrun(RUN, grace=1)
    manifest["spec"] = {**manifest["spec"], "irreversibleBeforePivot": "count"}  # type: ignore[dict-item]
    cluster.kube.create(manifest)
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", RUN), env={
        "AGENTSAGA_IRREVERSIBLE_BEFORE_PIVOT": "count"}).client()
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "create_ticket", {"summary": "Refund for order 3001", "order_id": "3001"})
    add_fault(cluster.dsn, "send_email", "unknown_after_commit")
    with pytest.raises(ToolNeedsHuman) as raised:
        agent.dispatch(RUN, "send_email", EMAIL)
    key = raised.value.idempotency_key
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:  # in truth it never left
        conn.execute("DELETE FROM ledger WHERE kind = 'email'")

    # the resync shows the waiting step, the bind the pod (phase Running): two writers, both
    # waited for, before the table is read and the pod evicted
    cluster.wait_run(RUN, lambda o: o["status"].get("awaitingHuman") == "1"
                     and o["status"].get("phase") == "Running")
    table = cluster.kube.kubectl("get", "agentruns")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "STEPS", "UNKNOWN", "PIVOT", "HUMAN", "AGE"]
    human = row[header.index("HUMAN"):header.index("AGE")].strip()
    assert row.split()[:3] == [RUN, "Running", "2"] and human == "1", table.stdout

    evict(cluster, "agent-0")
    [job] = cluster.wait_jobs(1)
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [
        NEEDS_HUMAN_EXIT]
    stopped = cluster.job_result(job)
    assert stopped.returncode == NEEDS_HUMAN_EXIT and not stopped.succeeded, stopped.output
    assert f"agentsaga settle --run {logged(RUN)} --step 1" in stopped.output
    failed = cluster.wait_phase(RUN, "Failed")
    assert "wait for a person to settle them" in failed["status"]["message"]

    settle(cluster, 1, outcome="NotHappened", settler="alice", reason="not in the SMS log",
           stepKey="0" * 32)
    refused = cluster.wait_run(RUN, lambda o: (condition(o, "StepsSettled") or {}).get(
        "status") == "False")
    assert "not '00000000" in (condition(refused, "StepsSettled") or {})["message"]
    assert "1" not in (refused["status"].get("settlements") or {})  # consumed
    assert refused["status"]["awaitingHuman"] == "1"

    assert refused["status"]["humanSteps"]["1"]["stepKey"] == key

    # bound in Warn only, the admission policy checks no settler's name: nothing is recorded
    binding = "saga-agentsaga-approval"
    cluster.kube.patch(ADMISSION, "validatingadmissionpolicybindings", None, binding,
                       {"spec": {"validationActions": ["Warn", "Audit"]}})
    settle(cluster, 1, outcome="NotHappened", settler="alice", reason="not in the SMS log",
           stepKey=key)
    warned = cluster.wait_run(RUN, lambda o: "not bound with validationActions Deny" in (
        (condition(o, "StepsSettled") or {}).get("message") or ""))
    assert "status.settlements[*].settler" in (condition(warned, "StepsSettled") or {})["message"]
    assert "1" not in (warned["status"].get("settlements") or {})  # consumed, not recorded
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        unsettled = saga_log.step(logged(RUN), 1)
    assert unsettled is not None and unsettled.status == "UNKNOWN"
    cluster.kube.patch(ADMISSION, "validatingadmissionpolicybindings", None, binding,
                       {"spec": {"validationActions": ["Deny"]}})
    settled = kubectl_agentsaga(cluster.kube, "settle", RUN, "1", "--not-happened", "--reason",
                                "not in the SMS log")
    assert settled.returncode == 0, settled.stderr
    # the plugin settles as the user the API server names (`kubectl auth whoami`)
    assert f"step 1 (send_email) settled as NotHappened by {ADMIN}" in settled.stdout
    recorded = cluster.wait_run(RUN, lambda o: ((o["status"].get("settlements") or {}).get(
        "1") or {}).get("state") == "Recorded")
    assert (condition(recorded, "StepsSettled") or {})["status"] == "True"
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        step = saga_log.step(logged(RUN), 1)
        [item] = saga_log.settlements(logged(RUN))
    assert step is not None and step.status == "NOT_EXECUTED"
    assert (item.settler, item.outcome, item.reason) == (ADMIN, "NotHappened",
                                                         "not in the SMS log")

    # nothing waits any more: the operator starts the unwind again (the next epoch's Job)
    jobs = cluster.wait_jobs(2)
    again = next(j for j in jobs if j["metadata"]["name"] != job["metadata"]["name"])
    assert again["metadata"]["name"] == job_name(RUN, "unwind", 2)
    done = cluster.job_result(again)
    assert done.returncode == 0 and done.succeeded, done.output
    unwound = cluster.wait_phase(RUN, "Unwound")
    assert "awaitingHuman" not in unwound["status"] and "humanSteps" not in unwound["status"]
    not_waiting = kubectl_agentsaga(cluster.kube, "settle", RUN, "1", "--happened", "--reason",
                                    "late")
    assert not_waiting.returncode == 1
    assert "is not waiting for a person (steps waiting: none)" in not_waiting.stderr
    assert [t["closed"] for t in effects(cluster.dsn, "ticket")] == [True]
    assert effects(cluster.dsn, "email") == []
