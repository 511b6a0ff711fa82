"""The sidecar's side of R12 on Kubernetes: bind each run to its AgentRun and to this pod.

When a run begins (BeginRun), the sidecar creates the run's AgentRun, or adopts it: it writes
`status.pod` (this pod's name, uid and namespace, from the downward API), `status.ownerEpoch`
(the fencing token the saga log just gave this process) and phase Running. The operator then
knows which pod to watch: if this pod is evicted or deleted while the run is unfinished, the
run becomes Orphaned; if another pod adopts it first, the epoch moved and this pod's sidecar,
should it still be alive, is refused (`Fenced`) on its next write.

Agent pods carry the label `agentsaga.io/run` (set by whoever creates the pod: its value names
the AgentRun, or anything for a pod that serves several runs); the operator watches pods by that
label and links them to runs through `status.pod.uid`. The sidecar needs no right on pods.

Enabled when `AGENTSAGA_POD_NAME` is set (the chart sets it) and `AGENTSAGA_AGENTRUN` is not
`off`; credentials come from the pod's service account, else from KUBECONFIG.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from agentsaga import telemetry
from agentsaga.errors import ConfigurationError
from agentsaga.settings import Settings

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "agentsaga.io", "v1alpha1", "agentruns"
_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

__all__ = ["AgentRunBinder", "PodRef", "agentrun_name", "begin_hook"]


def agentrun_name(run_id: str) -> str:
    """The AgentRun's name: the run id if it is a valid object name, else a stable derived
    one (the run id itself is always in `spec.runId`)."""
    if len(run_id) <= 253 and _DNS1123.fullmatch(run_id):
        return run_id
    base = re.sub(r"[^a-z0-9]+", "-", run_id.lower()).strip("-")[:40] or "run"
    return f"{base}-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class PodRef:
    name: str
    namespace: str
    uid: str


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AgentRunBinder:
    """Creates or adopts AgentRuns for the runs this sidecar begins."""

    def __init__(self, api: client.ApiClient, pod: PodRef, attempts: int = 8) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.pod = pod
        self.attempts = attempts

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentRunBinder | None:
        if not settings.pod_name or not settings.agentrun:
            return None
        configuration = client.Configuration()
        try:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration)
        except config.ConfigException:
            try:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration)
            except (config.ConfigException, OSError) as exc:
                raise ConfigurationError(
                    f"AGENTSAGA_POD_NAME is set but there are no Kubernetes credentials ({exc}); "
                    "mount the service account token, set KUBECONFIG, or set "
                    "AGENTSAGA_AGENTRUN=off to run without AgentRuns") from exc
        namespace = settings.pod_namespace or "default"
        return cls(client.ApiClient(configuration),
                   PodRef(settings.pod_name, namespace, settings.pod_uid))

    def bind(self, run_id: str, agent: str, epoch: int, adopted: bool) -> dict[str, Any]:
        """Create or adopt the run's AgentRun and bind it to this pod at `epoch` (R12)."""
        name = agentrun_name(run_id)
        ns = self.pod.namespace
        # the run's trace, for the operator and the Jobs that act on the run later
        annotations = telemetry.run_annotations(telemetry.trace_carrier())
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentRun",
            "metadata": {"name": name, "namespace": ns, "annotations": annotations},
            "spec": {"agent": agent or "agent", "runId": run_id},
        }
        try:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self._annotate(ns, name, annotations)
        for _ in range(self.attempts):
            current = cast(dict[str, Any], self.custom.get_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name))
            spec_run = (current.get("spec") or {}).get("runId") or name
            if spec_run != run_id:
                raise ConfigurationError(
                    f"AgentRun {ns}/{name} belongs to run {spec_run!r}, not {run_id!r}")
            status = current.get("status") or {}
            if int(status.get("ownerEpoch") or 0) > epoch:
                log.warning("AgentRun %s/%s is bound to a newer owner (epoch %s > %s)", ns, name,
                            status.get("ownerEpoch"), epoch, extra={"run_id": run_id})
                return current
            how = "adopted" if adopted else "began"
            message = f"pod {self.pod.name} {how} the run (owner epoch {epoch})"
            conditions = [c for c in status.get("conditions") or []
                          if c.get("type") != "Orphaned"]
            if any(c.get("type") == "Orphaned" for c in status.get("conditions") or []):
                conditions.append({
                    "type": "Orphaned", "status": "False", "reason": "Adopted",
                    "message": message, "lastTransitionTime": _stamp(),
                    "observedGeneration": int(current["metadata"].get("generation") or 0)})
            patch = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "status": {
                    "pod": {"name": self.pod.name, "uid": self.pod.uid,
                            "namespace": self.pod.namespace},
                    "ownerEpoch": epoch, "phase": "Running", "conditions": conditions,
                    "orphanedAt": None, "orphanReason": None, "message": message,
                },
            }
            try:
                written = self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, ns, PLURAL, name, patch,
                    _content_type="application/merge-patch+json")
            except ApiException as exc:
                if exc.status == 409:
                    continue
                raise
            log.info("AgentRun %s/%s bound to pod %s at epoch %d", ns, name, self.pod.name,
                     epoch, extra={"run_id": run_id})
            return cast(dict[str, Any], written)
        raise ConfigurationError(f"AgentRun {ns}/{name} kept changing; could not bind it")


    def _annotate(self, ns: str, name: str, annotations: dict[str, str]) -> None:
        """An AgentRun made by someone else (kubectl apply) gets the run's trace annotation
        unless it has one: the first trace of the run is the one that operators follow."""
        if not annotations:
            return
        current = cast(dict[str, Any], self.custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, name))
        if telemetry.ANNOTATION in ((current.get("metadata") or {}).get("annotations") or {}):
            return
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, name, {"metadata": {"annotations": annotations}},
            _content_type="application/merge-patch+json")


def begin_hook(settings: Settings, epoch_of: Callable[[str], int],
               on_spec: Callable[[str, dict[str, Any]], None] | None = None,
               ) -> Callable[[str, str, bool], None] | None:
    """The sidecar's `Extensions.on_begin`: bind each begun run (None outside a pod), and hand
    the AgentRun's spec (its pivot policy) to `on_spec`."""
    binder = AgentRunBinder.from_settings(settings)
    if binder is None:
        return None

    def on_begin(run_id: str, agent: str, adopted: bool) -> None:
        bound = binder.bind(run_id, agent, epoch_of(run_id), adopted)
        if on_spec is not None:
            on_spec(run_id, dict(bound.get("spec") or {}))

    return on_begin
