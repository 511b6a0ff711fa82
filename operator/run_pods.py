"""Which AgentRuns each pod serves: (pod namespace, pod uid) → AgentRun names, kept from the
AgentRuns' watch events (`runs.run_changed`) for the pod handler (`pods.agent_pod`).

This is not a kopf index on purpose: kopf holds every handler back until each object of an
indexed kind has been indexed, through a toggle per object whose every change wakes every
waiting worker — quadratic in the number of objects (10,000 AgentRuns: no handler had run after
minutes). A pod event that arrives before its run was seen here loses nothing: the run's
resync daemon checks the bound pod on its first pass (`pods.bound_pod_gone`), and the pod's
`agentsaga.io/run` label names a run not yet bound.
"""

from __future__ import annotations

from agentsaga.operator.status import Obj

PodKey = tuple[str, str]
"""(pod namespace, pod uid)"""
RunKey = tuple[str, str]
"""(AgentRun namespace, AgentRun name)"""


def bound_pod(run: Obj) -> PodKey | None:
    """The pod the run is bound to (`status.pod`), if any."""
    pod = (run.get("status") or {}).get("pod") or {}
    if not pod.get("uid"):
        return None
    return str(pod.get("namespace") or run["metadata"]["namespace"]), str(pod["uid"])


class RunsByPod:
    """Lives on kopf's event loop: every method is called from it."""

    def __init__(self) -> None:
        self._runs: dict[PodKey, set[RunKey]] = {}
        self._pods: dict[RunKey, PodKey] = {}

    def seen(self, namespace: str, name: str, run: Obj | None) -> None:
        """The run as its newest watch event shows it (None: deleted)."""
        key = (namespace, name)
        pod = None if run is None else bound_pod(run)
        old = self._pods.pop(key, None)
        if old is not None and old != pod:
            runs = self._runs.get(old, set())
            runs.discard(key)
            if not runs:
                self._runs.pop(old, None)
        if pod is not None:
            self._pods[key] = pod
            self._runs.setdefault(pod, set()).add(key)

    def runs(self, namespace: str, uid: str) -> frozenset[str]:
        """Names of the AgentRuns bound to this pod."""
        return frozenset(name for _, name in self._runs.get((namespace, uid), ()))
