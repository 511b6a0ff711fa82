"""An operator that idles: a finished AgentRun has no resync daemon and costs no API request,
however long the operator runs; an unfinished one is resynced when its saga log changes (the
batched log watch), not on a timer per run. Requests are counted at the API stand-in."""

from __future__ import annotations

from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.store import SagaLog
from agentsaga_lab.bench.tools import registry
from sagatest.cluster.chart import OPERATOR
from sagatest.operator_fixtures import AR, Cluster, cluster

__all__ = ["cluster"]

FINISHED = [f"finished-{i}" for i in range(5)]


def _finished_run(cluster: Cluster, name: str, phase: str) -> None:
    cluster.kube.create({"apiVersion": AR, "kind": "AgentRun",
                         "metadata": {"name": name, "namespace": "default"},
                         "spec": {"agent": "refunder"}})
    cluster.write_status_as_operator(name, {"phase": phase,
                                            "message": "the run ended in the saga log"})


def _steps(cluster: Cluster, name: str, total: int) -> None:
    cluster.wait_run(name, lambda o: ((o.get("status") or {}).get("steps") or {}).get("total")
                     == total)


def test_finished_runs_cost_no_request_and_a_live_run_wakes_on_its_log(cluster: Cluster) -> None:
    for i, name in enumerate(FINISHED):
        _finished_run(cluster, name, ("Succeeded", "Failed", "Unwound")[i % 3])
    with SagaLog(cluster.dsn, min_size=1, max_size=2).open() as saga_log:
        settings = Settings(recheck_pause_s=0, pod_namespace="default")
        service = SagaService(saga_log, registry, settings)
        service.begin_run("live-run")
        cluster.apply_agentrun("live-run")
        cluster.start_operator("--standalone", "--full-resync-interval", "3600", resync=0.2)
        _steps(cluster, "live-run", 0)
        # kopf's own first-sight bookkeeping done: the finalizer, and then (its last write)
        # the last-handled configuration once the creation handlers ran
        for name in FINISHED:
            cluster.wait_run(name, lambda o: bool(o["metadata"].get("finalizers")) and (
                "agentsaga.io/last-handled-configuration"
                in (o["metadata"].get("annotations") or {})))
        mark = len(cluster.kube.requests)

        for total in (1, 2, 3):  # each change is seen by a later round of the log watch
            assert service.dispatch("live-run", "noop", {"n": total}).outcome == "CONFIRMED"
            _steps(cluster, "live-run", total)

    since = [r for r in cluster.kube.requests[mark:]
             if r.user == OPERATOR and r.verb != "watch"]
    assert not [r for r in since if "/agentruns/finished-" in r.path], since
    # per change: read the run, read it again for the compare-and-swap write, write it
    live = [r for r in since if r.path.endswith("/agentruns/live-run")
            or r.path.endswith("/agentruns/live-run/status")]
    assert len(live) <= 3 * 4, live
