"""A pod that goes before the operator bound its run: the orphaning names the pod at the log's
epoch, so that the bind arriving late is no adoption (the run stays Orphaned, its grace period
runs); a pod that adopts the run at a newer epoch still does. The operator's own functions,
in-process, against the Kubernetes API stand-in and a real saga log, in the order the race
would take."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agentsaga.operator.config import OperatorConfig
from agentsaga.operator.context import Context
from agentsaga.operator.kube import KubeApi
from agentsaga.operator.run_binding import bind
from agentsaga.operator.run_jobs import orphan
from kubernetes import config

from agentsaga.keys import log_run_id
from agentsaga.store import SagaLog
from sagatest.kube_fixtures import Kube
from sagatest.operator_fixtures import AR

RUN = "early-evicted"
LOGGED = log_run_id("default", RUN)


@pytest.fixture
def ctx(kube_with_crds: Kube, pg: str) -> Iterator[Context]:
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kube_with_crds.kubeconfig))
    with SagaLog(pg, min_size=1, max_size=2).open(migrate=False) as saga_log:
        yield Context(OperatorConfig(dsn=pg), KubeApi(api), saga_log)
    api.close()


def test_a_late_bind_of_the_evicted_pod_leaves_the_run_orphaned(
        ctx: Context, kube_with_crds: Kube) -> None:
    assert ctx.saga_log is not None
    kube_with_crds.create({"apiVersion": AR, "kind": "AgentRun",
                           "metadata": {"name": RUN, "namespace": "default"},
                           "spec": {"agent": "refunder", "orphanGracePeriodSeconds": 60}})
    ctx.saga_log.begin_run(LOGGED, agent="refunder", owner="agent-0", pod_uid="uid-0",
                           namespace="default")
    late = ctx.saga_log.require_run(LOGGED)  # what the bind read before the pod went

    assert orphan(ctx, "default", RUN, "agent-0", "uid-0", "Evicted", "pod agent-0 was evicted")
    orphaned = kube_with_crds.get(AR, "agentruns", "default", RUN)
    assert orphaned is not None
    assert orphaned["status"]["phase"] == "Orphaned"
    assert orphaned["status"]["pod"] == {"name": "agent-0", "uid": "uid-0",
                                         "namespace": "default"}
    assert orphaned["status"]["ownerEpoch"] == 1

    bind(ctx, late)
    after = kube_with_crds.get(AR, "agentruns", "default", RUN)
    assert after is not None and after["status"] == orphaned["status"]  # no adoption

    # a pod that adopts the run (the orphaning released the evicted one) is: a newer epoch
    ctx.saga_log.begin_run(LOGGED, agent="refunder", owner="agent-1", pod_uid="uid-1",
                           namespace="default")
    adopted = ctx.saga_log.require_run(LOGGED)
    assert adopted.owner_epoch == 2
    bind(ctx, adopted)
    running = kube_with_crds.get(AR, "agentruns", "default", RUN)
    assert running is not None
    assert (running["status"]["phase"], running["status"]["pod"]["name"],
            running["status"]["ownerEpoch"]) == ("Running", "agent-1", 2)
