"""Orphaned runs end to end: eviction → Orphaned → (grace) → one unwind Job → Unwound; a pod
that adopts the run in time prevents the Job and fences the evicted pod's sidecar (R12)."""

from __future__ import annotations

import datetime

import grpc
import psycopg
import pytest

from agentsaga.client import RunTakenOver
from agentsaga.operator.job_manifests import job_name
from sagatest.cluster.chart import OPERATOR
from sagatest.cluster.kube import Request
from sagatest.ledger_tools import calls, effects
from sagatest.operator_fixtures import AR, Cluster, agentrun, evict, logged
from sagatest.world_fixtures import poll_until

# the module's tests share one cluster: each makes and changes objects in `default` only
pytestmark = pytest.mark.one_cluster_per_module

RUN = "refund-1182"


def saga_rows(dsn: str) -> list[tuple[object, ...]]:
    """The run and its steps, every column (epoch, state, statuses, timestamps)."""
    with psycopg.connect(dsn) as conn:
        return [*conn.execute("SELECT * FROM saga_runs ORDER BY run_id").fetchall(),
                *conn.execute("SELECT * FROM saga_log ORDER BY run_id, step_idx").fetchall()]


def operator_read_run(request: Request) -> bool:
    """A request of the operator's resync pass: the GET of the run that begins each pass."""
    return (request.user == OPERATOR and request.verb == "get"
            and request.path.endswith(f"/agentruns/{RUN}")
            and not request.user_agent.startswith("kopf"))


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

    # Orphaned lasts the grace period (1 s) only: wait for what the orphaning wrote, which the
    # Unwinding phase after it keeps
    orphaned = cluster.wait_run(RUN, lambda o: bool(o["status"].get("orphanedAt")))
    assert orphaned["status"]["phase"] in ("Orphaned", "Unwinding")
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
    assert container["command"] == ["agentsaga", "unwind", "--run", logged(RUN)]
    assert container["image"] == cluster.sidecar_image
    assert "restartPolicy" not in container and "readinessProbe" not in container
    assert job["metadata"]["ownerReferences"][0]["name"] == RUN
    unwinding = cluster.wait_phase(RUN, "Unwinding")
    assert unwinding["status"]["job"]["name"] == job["metadata"]["name"]

    done = cluster.job_result(job)
    assert done.returncode == 0 and done.succeeded, done.output

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
    # a grace period no adoption below can outlast, however slow the machine; once the run is
    # adopted the test shortens it to 1 s (read at every check), so that it is over at once
    cluster.kube.create(agentrun(RUN, grace=600))
    # a full resync of a Running run every 0.3 s (±25%): the passes after the grace period
    # are what the end of this test waits for
    cluster.start_operator("--standalone", "--full-resync-interval", "0.3")
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

    rows_before, calls_before = saga_rows(cluster.dsn), calls(cluster.dsn)
    with pytest.raises(RunTakenOver, match="adopted by a newer owner") as refused:
        old.dispatch(RUN, "create_ticket", {"summary": "again", "order_id": "1183"})
    assert refused.value.__cause__.code() == grpc.StatusCode.ABORTED  # type: ignore[union-attr]
    for stale in (old.reconcile, old.unwind, old.end_run):  # R12 on every path, not only Dispatch
        with pytest.raises(RunTakenOver, match="adopted by a newer owner"):
            stale(RUN)
    assert saga_rows(cluster.dsn) == rows_before, "the stale sidecar wrote to the saga log"
    assert calls(cluster.dsn) == calls_before, "the stale sidecar called a real system"

    # The grace period runs out with the run adopted: shortened to 1 s, it ended long ago (the
    # orphaning was at least that long before this patch's passes). What the test waits for is
    # the operator's own decision: two resync passes over the run that began after the patch
    # (the first of them has then finished) found it Running and started no Job.
    orphaned_at = datetime.datetime.fromisoformat(
        orphaned["status"]["orphanedAt"].replace("Z", "+00:00"))
    poll_until(lambda: datetime.datetime.now(datetime.UTC) >= orphaned_at
               + datetime.timedelta(seconds=1) or None, timeout=10)
    cluster.kube.patch(AR, "agentruns", "default", RUN,
                       {"spec": {"orphanGracePeriodSeconds": 1}})
    seen = len(cluster.kube.requests)
    passes = poll_until(lambda: [r for r in cluster.kube.requests[seen:] if operator_read_run(r)]
                        [1:] or None, timeout=10)
    assert passes and cluster.jobs() == [], "a Job was started for a run adopted in time"
    assert cluster.agentrun(RUN)["status"]["phase"] == "Running"  # type: ignore[index]
    new.dispatch(RUN, "create_ticket", {"summary": "second", "order_id": "1183"})
    assert len(effects(cluster.dsn, "ticket")) == 2
