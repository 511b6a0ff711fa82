"""An effect found after the run ended (R7, R8): a call that outlived its tool's declared deadline
lands after the unwind Job settled its step as never happened and finished. The call comes back
to its fenced sidecar, which records what it saw; the operator, told by the log, unwinds the
run again, and the second Job re-opens the step and compensates it, and only it."""

from __future__ import annotations

import threading
from typing import Any

from agentsaga.keys import step_key
from agentsaga.operator.job_manifests import job_name
from agentsaga.states import StepStatus
from agentsaga.store import SagaLog
from sagatest.ledger_tools import add_fault, effects, release
from sagatest.operator_fixtures import Cluster, agentrun, evict, logged

RUN = "late-3001"


def test_an_effect_a_late_call_saw_after_the_unwind_ended_is_compensated_by_a_second_job(
        cluster: Cluster) -> None:
    cluster.kube.create(agentrun(RUN, grace=1))
    cluster.start_operator("--standalone")
    agent = cluster.start_sidecar(cluster.create_pod("agent-0", RUN)).client()
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "create_ticket", {"summary": "refund 1182", "order_id": "1182"})
    # the next call is held by the ticket system until after the run is unwound; the tool
    # declares no time contract, so the unwind settles it as never happened at once
    add_fault(cluster.dsn, "create_ticket", "held_commit")
    answers: list[Any] = []

    def held_call() -> None:
        try:
            answers.append(agent.dispatch(RUN, "create_ticket",
                                          {"summary": "refund 1183", "order_id": "1183"}))
        except Exception as exc:  # fenced when it comes back: the run was taken over
            answers.append(exc)

    caller = threading.Thread(target=held_call)
    caller.start()
    cluster.wait_run(RUN, lambda o: (o["status"].get("steps") or {}).get("total") == 2)

    evict(cluster, "agent-0")
    [first] = cluster.wait_jobs(1)
    done = cluster.job_result(first)
    assert done.returncode == 0 and done.succeeded, done.output
    cluster.wait_phase(RUN, "Unwound")
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        assert [s.status for s in saga_log.steps(logged(RUN))] == [
            StepStatus.COMPENSATED, StepStatus.NOT_EXECUTED]

    release(cluster.dsn, "create_ticket")  # the held call lands, after the run ended
    caller.join(timeout=30)
    assert answers and isinstance(answers[0], Exception)  # its sidecar was fenced

    second = next(j for j in cluster.wait_jobs(2)
                  if j["metadata"]["name"] != first["metadata"]["name"])
    assert second["metadata"]["name"] == job_name(RUN, "unwind", 2)
    late = cluster.wait_run(RUN, lambda o: o["status"].get("phase") == "Unwinding")
    assert "a call came back with the effect of a step" in late["status"]["message"]
    done = cluster.job_result(second)
    assert done.returncode == 0 and done.succeeded, done.output
    unwound = cluster.wait_phase(RUN, "Unwound")
    assert unwound["status"]["steps"]["compensated"] == 2

    tickets = {t["key"]: t for t in effects(cluster.dsn, "ticket")}
    late_key = step_key(logged(RUN), 1, "create_ticket")
    assert set(tickets) == {step_key(logged(RUN), 0, "create_ticket"), late_key}
    assert all(t["closed"] for t in tickets.values())  # the late one too, once
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as saga_log:
        assert [s.status for s in saga_log.steps(logged(RUN))] == [
            StepStatus.COMPENSATED, StepStatus.COMPENSATED]
        assert saga_log.late_effects() == []
    assert len(cluster.jobs()) == 2
