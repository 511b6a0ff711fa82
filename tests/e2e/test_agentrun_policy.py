"""The AgentRun's spec sets its run's pivot rules (R10), copied into the log by the operator:
`irreversibleBeforePivot: count` lets an early irreversible call run and counts it;
`pivot.required` keeps the run from succeeding without an approved plan."""

from __future__ import annotations

import grpc
import pytest

from sagatest.ledger_tools import effects
from sagatest.operator_fixtures import Cluster

# the module's tests share one cluster: each makes and changes objects in `default` only
pytestmark = pytest.mark.one_cluster_per_module

RUN = "policy-run"


def test_the_agentruns_spec_sets_its_pivot_rules(cluster: Cluster) -> None:
    cluster.apply_agentrun(RUN, irreversibleBeforePivot="count", pivot={"required": True})
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", RUN)).client()  # refuse default
    agent.begin_run(RUN, agent="refunder")
    # the operator copies the AgentRun's policy into the log, where the sidecar reads it
    policy = cluster.wait_log(RUN, lambda run: run.policy is not None)
    assert policy.policy is not None
    # with the approval time-to-live that holds for it: the operator's default, one day
    assert (policy.policy["irreversibleBeforePivot"], policy.policy["pivot"]) == (
        "count", {"required": True, "approvalTtlSeconds": 86400})
    agent.dispatch(RUN, "send_email", {"to": "c@example.com", "body": "early"})
    assert len(effects(cluster.dsn, "email")) == 1
    counted = cluster.wait_run(RUN, lambda o: o["status"].get("irreversibleBeforePivot") == 1)
    assert counted["status"]["irreversibleBeforePivot"] == 1

    with pytest.raises(grpc.RpcError) as error:
        agent.end_run(RUN, "Succeeded")
    assert error.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "requires a pivot" in (error.value.details() or "")
    assert agent.end_run(RUN, "Failed").state == "failed"


def test_the_operator_creates_the_agentrun_of_a_run_begun_in_a_pod(cluster: Cluster) -> None:
    """No AgentRun applied beforehand and no credentials in the sidecar: the operator learns of
    the run from the log and creates its AgentRun, bound to the pod at the run's epoch."""
    cluster.start_operator("--standalone", resync=30)  # LISTEN/NOTIFY, not the resync
    pod = cluster.create_pod("agent-1", "fresh-run")
    agent = cluster.start_sidecar(pod).client()
    agent.begin_run("fresh-run", agent="refunder")
    bound = cluster.wait_run("fresh-run", lambda o: ((o.get("status") or {}).get("pod") or {})
                             .get("uid") == pod["metadata"]["uid"])
    assert bound["spec"]["runId"] == "fresh-run"
    assert bound["status"]["pod"] == {"name": "agent-1", "uid": pod["metadata"]["uid"],
                                      "namespace": "default"}
    assert bound["status"]["phase"] == "Running" and bound["status"]["ownerEpoch"] == 1
