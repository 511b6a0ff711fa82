"""The operator outlives its API server: a restart (every watch cut, then resumed: an eviction
after it still orphans the run and starts its one Job), and a restart past a compaction of etcd
(every watch resumed from a resourceVersion etcd no longer has: 410 Gone, a fresh list) with
the run's pod gone meanwhile: no event ever says so, the relisted run's pass finds it."""

from __future__ import annotations

import pytest

from sagatest.cluster.chart import OPERATOR
from sagatest.operator_fixtures import Cluster, agentrun, evict

# the module's tests share one cluster: each makes and changes objects in `default` only
pytestmark = pytest.mark.one_cluster_per_module

RUN = "refund-5001"


def running_run(cluster: Cluster) -> None:
    cluster.kube.create(agentrun(RUN, grace=1))
    cluster.start_operator("--standalone")
    pod = cluster.create_pod("agent-0", RUN)
    agent = cluster.start_sidecar(pod).client()
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "create_ticket", {"summary": "refund 5001", "order_id": "5001"})
    cluster.wait_run(RUN, lambda o: (o["status"].get("pod") or {}).get("uid")
                     == pod["metadata"]["uid"]
                     and (o["status"].get("steps") or {}).get("confirmed") == 1)


def operator_lists_since(cluster: Cluster, seen: int) -> set[str]:
    return {r.path for r in cluster.kube.requests[seen:]
            if r.user == OPERATOR and r.verb == "list" and r.status == 200}


def test_an_api_server_restart_loses_no_eviction(cluster: Cluster) -> None:
    running_run(cluster)
    cluster.kube.plane.restart_apiserver()

    evict(cluster, "agent-0")
    [job] = cluster.wait_jobs(1, timeout=60)
    done = cluster.job_result(job)
    assert done.returncode == 0 and done.succeeded, done.output
    cluster.wait_phase(RUN, "Unwound", timeout=30)


def test_a_pod_gone_while_the_watches_were_down_is_found_after_the_relist(
        cluster: Cluster) -> None:
    """The pod goes while the API server is down (removed from etcd: no watch event for it, ever)
    and etcd forgets everything before that: every resourceVersion the operator holds is too
    old (410 Gone), it lists again, and the listing no longer has the pod."""
    running_run(cluster)
    plane = cluster.kube.plane
    plane.stop_apiserver()
    assert plane.remove_from_etcd("/registry/pods/default/agent-0") == 1
    plane.compact()
    seen = len(cluster.kube.requests)
    plane.start_apiserver()

    [job] = cluster.wait_jobs(1, timeout=60)
    assert job["metadata"]["ownerReferences"][0]["name"] == RUN
    orphaned = cluster.wait_run(RUN, lambda o: bool(o["status"].get("orphanedAt")))
    assert "agent-0 no longer exists" in orphaned["status"]["orphanReason"]
    # it listed again, its old resourceVersions refused (410 Gone) after the compaction
    relisted = operator_lists_since(cluster, seen)
    assert any(p.endswith("/agentruns") for p in relisted), relisted
    assert any(p.endswith("/pods") for p in relisted), relisted
    done = cluster.job_result(job)
    assert done.returncode == 0 and done.succeeded, done.output
    cluster.wait_phase(RUN, "Unwound", timeout=30)
