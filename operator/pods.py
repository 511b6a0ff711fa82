"""Agent pods: an evicted, deleted, failed or finished pod whose run is unfinished orphans it.

Agent pods carry the label `agentsaga.io/run` (whoever creates the pod sets it: the value names
the AgentRun, or anything for a pod that serves several runs). The link from a pod to its runs
is `status.pod.uid`, which the sidecar binds when a run begins (`agentsaga.agentrun`); the
label selects which pods to watch and names a run not yet bound.
"""

from __future__ import annotations

from typing import Any

import kopf

from agentsaga.operator import run_jobs
from agentsaga.operator.config import RUN_LABEL
from agentsaga.operator.context import Context, context
from agentsaga.operator.status import Obj


def disruption(pod: Obj, event: str | None = None) -> tuple[str, str] | None:
    """(reason, message) when this pod no longer serves its runs; None while it does.

    Eviction shows as the DisruptionTarget condition (its reason says by whom: the Eviction
    API, the kubelet, the scheduler, the taint manager) or as status.reason Evicted."""
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            detail = ": ".join(p for p in (cond.get("reason"), cond.get("message")) if p)
            return "Evicted", f"pod {name} was evicted ({detail or 'DisruptionTarget'})"
    if status.get("reason") == "Evicted":
        return "Evicted", f"pod {name} was evicted ({status.get('message') or 'Evicted'})"
    if event == "DELETED" or (pod["metadata"].get("deletionTimestamp")):
        return "PodDeleted", f"pod {name} was deleted"
    if status.get("phase") == "Failed":
        return "PodFailed", f"pod {name} failed ({status.get('reason') or 'Failed'})"
    if status.get("phase") == "Succeeded":
        return "PodCompleted", f"pod {name} completed without ending its run"
    return None


def bound_pod_gone(ctx: Context, run: Obj) -> tuple[str, str, str, str] | None:
    """For the resync (events can be missed while the operator is down): the run's bound pod
    is gone or disrupted → (pod name, uid, reason, message)."""
    status = run.get("status") or {}
    bound = status.get("pod") or {}
    if not bound.get("name"):
        return None
    namespace = bound.get("namespace") or run["metadata"]["namespace"]
    pod = ctx.kube.get_pod(namespace, bound["name"])
    uid = bound.get("uid", "")
    if pod is None:
        return bound["name"], uid, "PodDeleted", f"pod {bound['name']} no longer exists"
    if uid and pod["metadata"].get("uid") != uid:
        return (bound["name"], uid, "PodDeleted",
                f"pod {bound['name']} was deleted (a new pod of that name has another uid)")
    found = disruption(pod)
    return None if found is None else (bound["name"], uid, *found)


@kopf.on.event("v1", "pods", labels={RUN_LABEL: kopf.PRESENT}, id="agent-pod")
def agent_pod(type: str, body: kopf.Body, namespace: str | None, memo: Any,
              **_: Any) -> None:
    pod = dict(body)
    gone = disruption(pod, type)
    if gone is None or namespace is None:
        return
    reason, message = gone
    uid = pod["metadata"].get("uid", "")
    ctx = context(memo)
    names = set(ctx.runs_by_pod.runs(namespace, uid))
    names.add(pod["metadata"].get("labels", {}).get(RUN_LABEL, ""))
    for name in sorted(n for n in names if n):
        run_jobs.orphan(ctx, namespace, name, pod["metadata"]["name"], uid, reason, message)
