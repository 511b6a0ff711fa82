"""The operator watching only its namespaces (`operator.watchNamespaces`): the chart binds its
role in those namespaces alone and ships a KopfPeering there. Running as the chart's operator
ServiceAccount with that RBAC, the operator peers, binds a run, sees its pod evicted, starts the
unwind Job and records the outcome, and is refused nothing (the fixture checks); elsewhere it
may do nothing."""

from __future__ import annotations

from sagatest.ledger_tools import effects
from sagatest.operator_fixtures import Cluster, agentrun, evict

RUN = "scoped-run"


def test_an_operator_scoped_to_its_namespaces_unwinds_an_orphan(
        namespaced_cluster: Cluster) -> None:
    cluster = namespaced_cluster
    cluster.kube.create(agentrun(RUN, grace=1))
    operator = cluster.start_operator("--namespace", "default", "--peering", "agentsaga",
                                      "--priority", "100")
    operator.wait_for_output("Resuming operations after the pause", timeout=30)

    pod = cluster.create_pod("agent-0", RUN)
    agent = cluster.start_sidecar(pod).client()
    agent.begin_run(RUN, agent="refunder")
    agent.dispatch(RUN, "create_ticket", {"summary": "refund 1182", "order_id": "1182"})
    # the step shown (the resync) and the run bound to its pod (the bind) before the eviction
    cluster.wait_run(RUN, lambda o: (o["status"].get("steps") or {}).get("confirmed") == 1
                     and (o["status"].get("pod") or {}).get("uid") == pod["metadata"]["uid"])
    evict(cluster, "agent-0")
    [job] = cluster.wait_jobs(1)
    cluster.wait_phase(RUN, "Unwinding")
    done = cluster.job_result(job)
    assert done.returncode == 0 and done.succeeded, done.output
    cluster.wait_phase(RUN, "Unwound")
    assert all(t["closed"] for t in effects(cluster.dsn, "ticket"))

    # nothing beyond its namespaces
    for args in (["-n", "kube-system", "get", "pods"], ["get", "agentruns", "-A"],
                 ["-n", "kube-system", "create", "job", "x", "--image=busybox"]):
        refused = cluster.kube.kubectl(*args, kubeconfig=cluster.operator_kubeconfig)
        assert refused.returncode != 0 and "forbidden" in refused.stderr, args
    assert "Not enough permissions" not in operator.output()
