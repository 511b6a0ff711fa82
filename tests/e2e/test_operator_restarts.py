"""The operator killed (SIGKILL) and restarted at each stage of an orphaned run does no
duplicate work: one Job, created by one POST, and the run still ends Unwound."""

from __future__ import annotations

from agentsaga.operator.job_manifests import job_name
from sagatest.ledger_tools import effects
from sagatest.operator_fixtures import AR, Cluster

RUN = "refund-2001"


def job_posts(cluster: Cluster) -> int:
    return sum(1 for r in cluster.kube.requests
               if r.method == "POST" and r.path == "/apis/batch/v1/namespaces/default/jobs")


def test_operator_killed_at_every_stage_creates_one_job_and_loses_nothing(
        cluster: Cluster) -> None:
    cluster.kube.create({"apiVersion": AR, "kind": "AgentRun",
                         "metadata": {"name": RUN, "namespace": "default"},
                         "spec": {"agent": "refunder", "orphanGracePeriodSeconds": 2,
                                  # no Job while the first operator lives (however late the
                                  # test sees Orphaned); an unwind once it is killed
                                  "onOrphan": "wait"}})
    first = cluster.start_operator("--standalone")
    pod = cluster.create_pod("agent-0", RUN)
    agent = cluster.start_sidecar(pod).client()
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "create_ticket", {"summary": "refund", "order_id": "2001"})
    cluster.wait_phase(RUN, "Running")

    # stage 1: killed once it marked the run Orphaned; then the run is to be unwound
    cluster.kube.evict("default", "agent-0")
    cluster.wait_phase(RUN, "Orphaned")
    first.kill()
    cluster.kube.patch(AR, "agentruns", "default", RUN, {"spec": {"onOrphan": "unwind"}})

    # stage 2: killed after recording the Job in status, before creating it (crash point)
    second = cluster.start_operator(
        "--standalone", env={"AGENTSAGA_CRASH_AT": "operator:after_job_recorded"}, wait=False)
    assert second.proc.wait(timeout=20) == -9
    recorded = cluster.wait_phase(RUN, "Unwinding")
    name = job_name(RUN, "unwind", 1)
    assert recorded["status"]["job"]["name"] == name
    assert cluster.jobs() == [] and job_posts(cluster) == 0

    # stage 3: the next operator repairs it (creates the recorded Job), then is killed
    third = cluster.start_operator("--standalone")
    [job] = cluster.wait_jobs(1)
    assert job["metadata"]["name"] == name
    third.kill()

    # the Job runs and completes while no operator is up
    done = cluster.job_result(job)
    assert done.returncode == 0 and done.succeeded, done.output

    # stage 4: a fresh operator catches up from the Job's status alone
    cluster.start_operator("--standalone")
    unwound = cluster.wait_phase(RUN, "Unwound")
    assert unwound["status"]["job"] | {"startedAt": "", "finishedAt": ""} == {
        "name": name, "kind": "unwind", "state": "Succeeded", "startedAt": "",
        "finishedAt": ""}
    assert unwound["status"]["steps"]["compensated"] == 1
    assert [j["metadata"]["name"] for j in cluster.jobs()] == [name]
    assert job_posts(cluster) == 1
    [ticket] = effects(cluster.dsn, "ticket")
    assert ticket["closed"]
