"""HA: two operator replicas peer through kopf's ClusterKopfPeering (the chart's CRDs and
object); the lower-priority one pauses, so an orphaned run gets exactly one Job."""

from __future__ import annotations

from sagatest.operator_fixtures import Cluster, agentrun, evict
from sagatest.sidecar_fixtures import ROOT

PEERING_CRDS = ROOT / "charts" / "agentsaga" / "crds" / "kopfpeerings.kopf.dev.yaml"
PEERING = """
apiVersion: kopf.dev/v1
kind: ClusterKopfPeering
metadata:
  name: agentsaga
"""
RUN = "ha-run"


def test_two_replicas_one_acts(cluster: Cluster) -> None:
    assert cluster.kube.kubectl("apply", "-f", str(PEERING_CRDS)).returncode == 0
    assert cluster.kube.kubectl("apply", "-f", "-", input=PEERING).returncode == 0
    cluster.kube.create(agentrun(RUN, grace=1))
    active = cluster.start_operator("--peering", "agentsaga", "--priority", "200")
    standby = cluster.start_operator("--peering", "agentsaga", "--priority", "100", wait=False)
    # A replica starts paused (the peering is mandatory); it resumes only when no live peer
    # has a higher priority.
    active.wait_for_output("Resuming operations after the pause", timeout=20)

    pod = cluster.create_pod("agent-0", RUN)
    agent = cluster.start_sidecar(pod).client()
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "create_ticket", {"summary": "refund 1182", "order_id": "1182"})
    cluster.wait_phase(RUN, "Running")
    evict(cluster, "agent-0")
    cluster.wait_phase(RUN, "Unwinding")
    cluster.wait_jobs(1)
    # The standby is live and sees the active replica in the peering (its own keep-alive is in
    # the peering's status next to the active one's): it stays paused, whenever the run's events
    # reach it. (Not a pause on the wall clock: the condition that makes it stand by.)
    peering = cluster.kube.wait_for(
        "kopf.dev/v1", "clusterkopfpeerings", None, "agentsaga",
        lambda o: sorted(p.get("priority") for p in ((o or {}).get("status") or {}).values())
        == [100, 200], timeout=20)
    assert peering is not None
    # the one Job runs on the node and unwinds the run; the standby started none
    cluster.wait_phase(RUN, "Unwound")
    assert len(cluster.jobs()) == 1
    posts = [r for r in cluster.kube.requests if r.method == "POST" and r.path.endswith("/jobs")]
    assert len(posts) == 1
    assert "Resuming operations" not in standby.output()
