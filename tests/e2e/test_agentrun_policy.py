"""The AgentRun's spec sets its run's pivot rules (R10) in the sidecar that binds it:
`irreversibleBeforePivot: count` lets an early irreversible call run and counts it;
`pivot.required` keeps the run from succeeding without an approved plan."""

from __future__ import annotations

import grpc
import pytest

from sagatest.ledger_tools import effects
from sagatest.operator_fixtures import Cluster

RUN = "policy-run"


def test_the_agentruns_spec_sets_its_pivot_rules(cluster: Cluster) -> None:
    cluster.apply_agentrun(RUN, irreversibleBeforePivot="count", pivot={"required": True})
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", RUN)).client()  # refuse default
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "send_email", {"to": "c@example.com", "body": "early"})
    assert len(effects(cluster.dsn, "email")) == 1
    counted = cluster.wait_run(RUN, lambda o: o["status"].get("irreversibleBeforePivot") == 1)
    assert counted["status"]["irreversibleBeforePivot"] == 1

    with pytest.raises(grpc.RpcError) as error:
        agent.end_run(RUN, "Succeeded")
    assert error.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "requires a pivot" in (error.value.details() or "")
    assert agent.end_run(RUN, "Failed").state == "failed"
