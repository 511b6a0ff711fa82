"""Several writers of one AgentRun status, each leaving it whole whatever the order: a pod that
goes before the operator bound its run is named by the orphaning at the log's epoch, so that the
bind arriving late is no adoption (a newer epoch's is); the log lets go of a gone pod before the
status says Orphaned; a Job that ends the run in a final phase shows the log whole, as no resync
pass follows it. The operator's own functions, in-process, against a real API server and a real
saga log, in the order the race would take."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from kubernetes import config
from kubernetes.client import ApiClient

from agentsaga.keys import log_run_id
from agentsaga.operator.context import Context
from agentsaga.operator.kube import KubeApi, Mutation, Obj
from agentsaga.operator.run_binding import bind
from agentsaga.operator.run_jobs import apply_job, orphan
from agentsaga.settings import OperatorSettings
from agentsaga.states import RunState
from agentsaga.store import SagaLog
from sagatest.cluster.kube import Kube
from sagatest.operator_fixtures import AR

RUN = "early-evicted"
LOGGED = log_run_id("default", RUN)


@pytest.fixture
def saga_log(pg: str) -> Iterator[SagaLog]:
    """The whole log: what the test does as the sidecar or a Job (the operator's context holds
    the same log as its own role's `OperatorStore`)."""
    with SagaLog(pg, min_size=1, max_size=2).open(migrate=False) as log:
        yield log


@pytest.fixture
def ctx(kube_with_crds: Kube, pg: str, saga_log: SagaLog) -> Iterator[Context]:
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kube_with_crds.kubeconfig))
    yield Context(OperatorSettings(), KubeApi(api), saga_log)
    api.close()


def run_on_agent_0(saga_log: SagaLog, kube: Kube) -> None:
    """The AgentRun, and its run begun in the log by pod agent-0 (uid-0); the log."""
    kube.create({"apiVersion": AR, "kind": "AgentRun",
                 "metadata": {"name": RUN, "namespace": "default"},
                 "spec": {"agent": "refunder", "orphanGracePeriodSeconds": 60}})
    saga_log.begin_run(LOGGED, agent="refunder", owner="agent-0", pod_uid="uid-0",
                       namespace="default")


def test_a_late_bind_of_the_evicted_pod_leaves_the_run_orphaned(
        ctx: Context, kube_with_crds: Kube, saga_log: SagaLog) -> None:
    run_on_agent_0(saga_log, kube_with_crds)
    late = saga_log.require_run(LOGGED)  # what the bind read before the pod went

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
    saga_log.begin_run(LOGGED, agent="refunder", owner="agent-1", pod_uid="uid-1",
                       namespace="default")
    adopted = saga_log.require_run(LOGGED)
    assert adopted.owner_epoch == 2
    bind(ctx, adopted)
    running = kube_with_crds.get(AR, "agentruns", "default", RUN)
    assert running is not None
    assert (running["status"]["phase"], running["status"]["pod"]["name"],
            running["status"]["ownerEpoch"]) == ("Running", "agent-1", 2)


class WatchedKube(KubeApi):
    """The operator's API, noting what the saga log says of the run at the moment each status
    patch is sent."""

    def __init__(self, api: ApiClient, saga_log: SagaLog) -> None:
        super().__init__(api)
        self.saga_log = saga_log
        self.seen: list[tuple[str | None, bool]] = []

    def update_status(self, namespace: str, name: str, mutate: Mutation, attempts: int = 8,
                      known: Obj | None = None) -> Obj | None:
        def watched(run: Obj) -> Obj | None:
            patch = mutate(run)
            if patch:
                self.seen.append((patch.get("phase"),
                                  self.saga_log.require_run(LOGGED).bound_to_live_pod))
            return patch
        return super().update_status(namespace, name, watched, attempts, known)


def test_a_run_shown_orphaned_can_be_adopted_at_once(ctx: Context, kube_with_crds: Kube,
                                                     saga_log: SagaLog) -> None:
    """R12: the status says Orphaned only once the log has let go of the gone pod, so that a
    new pod (or a person told to wait for Orphaned) may adopt the run the moment they read it."""
    run_on_agent_0(saga_log, kube_with_crds)
    watched = WatchedKube(ctx.kube.api, saga_log)
    assert orphan(replace(ctx, kube=watched), "default", RUN, "agent-0", "uid-0", "Evicted",
                  "pod agent-0 was evicted")
    assert watched.seen == [("Orphaned", False)]
    adopted = saga_log.begin_run(LOGGED, agent="refunder", owner="agent-1", pod_uid="uid-1",
                                 namespace="default")
    assert adopted.adopted and adopted.run.owner_epoch == 2


def test_a_job_that_ends_the_run_leaves_no_stale_wait_for_a_person(
        ctx: Context, kube_with_crds: Kube, saga_log: SagaLog) -> None:
    """The unwind Job's end is the run's last status write (Unwound is final: no resync pass
    after it); a step that waited for a person when the status was last shown waits no more."""
    kube_with_crds.create({"apiVersion": AR, "kind": "AgentRun",
                           "metadata": {"name": RUN, "namespace": "default"},
                           "spec": {"agent": "refunder"}})
    saga_log.begin_run(LOGGED, agent="refunder", namespace="default")
    name = "early-evicted-unwind-2"
    job = {"metadata": {"name": name},
           "status": {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}}
    kube_with_crds.patch_status(AR, "agentruns", "default", RUN, {
        "phase": "Unwinding", "awaitingHuman": "1",
        "humanSteps": {"1": {"tool": "send_email", "stepKey": "0" * 32, "why": "no lookup"}},
        "job": {"name": name, "kind": "unwind", "state": "Created"}})
    adopted = saga_log.adopt(LOGGED, "unwind-job")  # the Job unwound the run
    saga_log.set_run_state(LOGGED, adopted.owner_epoch, RunState.UNWOUND, end=True)

    apply_job(ctx, "default", RUN, job)
    status = (kube_with_crds.get(AR, "agentruns", "default", RUN) or {})["status"]
    assert (status["phase"], status["job"]["state"]) == ("Unwound", "Succeeded")
    assert "awaitingHuman" not in status and "humanSteps" not in status
    assert status["ownerEpoch"] == adopted.owner_epoch
