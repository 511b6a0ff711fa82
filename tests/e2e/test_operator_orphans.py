"""Orphaned runs end to end: eviction → Orphaned → (grace) → one unwind Job → Unwound; a pod
that adopts the run in time prevents the Job and fences the evicted pod's sidecar (R12)."""

from __future__ import annotations

import datetime
import time

import grpc
import pytest
from agentsaga.operator.jobs import job_name

from agentsaga.client import RunTakenOver
from sagatest.ledger_tools import effects
from sagatest.operator_fixtures import Cluster, agentrun, evict

RUN = "refund-1182"


def test_evicted_pod_orphans_its_run_and_one_unwind_job_compensates_each_effect_once(
        cluster: Cluster) -> None:
    cluster.kube.create(agentrun(RUN, grace=1))
    cluster.start_operator("--standalone")
    pod = cluster.create_pod("agent-0", RUN)
    agent = cluster.start_sidecar(pod).client()
    agent.begin_run(RUN, agent="refunder")
    bound = cluster.wait_phase(RUN, "Running")
    assert bound["status"]["pod"] == {"name": "agent-0", "uid": pod["metadata"]["uid"],
                                      "namespace": "default"}
    assert bound["status"]["ownerEpoch"] == 1
    for order in ("1182", "1183"):
        agent.dispatch(RUN, "create_ticket", {"summary": f"refund {order}", "order_id": order})
    cluster.wait_run(RUN, lambda o: (o["status"].get("steps") or {}).get("confirmed") == 2)

    evict(cluster, "agent-0")

    orphaned = cluster.wait_phase(RUN, "Orphaned")
    assert "EvictionByEvictionAPI" in orphaned["status"]["orphanReason"]
    assert orphaned["status"]["orphanedAt"]
    condition = next(c for c in orphaned["status"]["conditions"] if c["type"] == "Orphaned")
    assert condition["status"] == "True" and condition["reason"] == "Evicted"
    assert "agent-0 was evicted" in condition["message"]
    waited = cluster.kube.kubectl("wait", f"agentrun/{RUN}", "--for=condition=Orphaned",
                                  "--timeout=10s")
    assert waited.returncode == 0, waited.stderr

    [job] = cluster.wait_jobs(1)
    assert job["metadata"]["name"] == job_name(RUN, "unwind", 1)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["agentsaga", "unwind", "--run", RUN]
    assert container["image"] == "agentsaga-sidecar:test"
    assert "restartPolicy" not in container and "readinessProbe" not in container
    assert job["metadata"]["ownerReferences"][0]["name"] == RUN
    unwinding = cluster.wait_phase(RUN, "Unwinding")
    assert unwinding["status"]["job"]["name"] == job["metadata"]["name"]

    done = cluster.run_job(job)
    assert done.returncode == 0, done.stdout + done.stderr
    cluster.finish_job(job["metadata"]["name"])

    unwound = cluster.wait_phase(RUN, "Unwound")
    assert unwound["status"]["steps"]["compensated"] == 2
    assert unwound["status"]["steps"]["total"] == 2
    assert unwound["status"]["job"]["state"] == "Succeeded"
    assert unwound["status"]["ownerEpoch"] == 2  # the Job adopted the run (R12)
    tickets = effects(cluster.dsn, "ticket")
    assert len(tickets) == 2 and all(t["closed"] for t in tickets)
    assert len(cluster.jobs()) == 1
    waited = cluster.kube.kubectl("wait", f"agentrun/{RUN}", "--for=condition=Unwound",
                                  "--timeout=10s")
    assert waited.returncode == 0, waited.stderr


def test_pod_adopting_within_grace_prevents_the_job_and_fences_the_evicted_sidecar(
        cluster: Cluster) -> None:
    cluster.kube.create(agentrun(RUN, grace=3))
    cluster.start_operator("--standalone")
    old_pod = cluster.create_pod("agent-0", RUN)
    old = cluster.start_sidecar(old_pod).client()
    new_pod = cluster.create_pod("agent-1", RUN)
    new = cluster.start_sidecar(new_pod).client()
    old.begin_run(RUN, agent="refunder")
    old.dispatch(RUN, "create_ticket", {"summary": "refund", "order_id": "1182"})
    cluster.wait_phase(RUN, "Running")

    evict(cluster, "agent-0")
    orphaned = cluster.wait_phase(RUN, "Orphaned")
    adopted = new.begin_run(RUN, agent="refunder")
    assert adopted.adopted and adopted.owner_epoch == 2
    running = cluster.wait_phase(RUN, "Running")
    assert running["status"]["pod"]["name"] == "agent-1"
    assert running["status"]["ownerEpoch"] == 2
    condition = next(c for c in running["status"]["conditions"] if c["type"] == "Orphaned")
    assert condition["status"] == "False" and condition["reason"] == "Adopted"

    with pytest.raises(RunTakenOver, match="adopted by a newer owner") as refused:
        old.dispatch(RUN, "create_ticket", {"summary": "again", "order_id": "1183"})
    assert refused.value.__cause__.code() == grpc.StatusCode.ABORTED  # type: ignore[union-attr]

    # The grace period runs out with the run adopted: through it and five resyncs after it,
    # no Job may appear and the run stays Running (an absence has no event to wait for).
    orphaned_at = datetime.datetime.fromisoformat(
        orphaned["status"]["orphanedAt"].replace("Z", "+00:00"))
    deadline = orphaned_at + datetime.timedelta(seconds=3 + 1)
    while datetime.datetime.now(datetime.UTC) < deadline:
        assert cluster.jobs() == []
        time.sleep(0.1)
    assert cluster.agentrun(RUN)["status"]["phase"] == "Running"  # type: ignore[index]
    new.dispatch(RUN, "create_ticket", {"summary": "second", "order_id": "1183"})
    assert len(effects(cluster.dsn, "ticket")) == 2
