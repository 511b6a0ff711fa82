"""The reconcile/unwind Job of an orphaned run: a deterministic name and the manifest.

The Job runs the sidecar image with `agentsaga reconcile --run RUN` or `agentsaga unwind --run
RUN`. With the chart's sidecar template mounted (AGENTSAGA_SIDECAR_TEMPLATE) it reuses the
sidecar container's image, environment (the DSN from the same Secret, connector endpoints and
credentials) and volumes, so the Job reaches the same Postgres and the same real systems.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any, Literal

from agentsaga.cli.job_commands import NEEDS_HUMAN_EXIT
from agentsaga.operator.config import (
    GROUP,
    JOB_KIND_LABEL,
    JOB_POD_LABEL,
    RUN_LABEL,
    VERSION,
)
from agentsaga.settings import OperatorSettings

JobKind = Literal["reconcile", "unwind", "corrections"]
Obj = dict[str, Any]
MAX_NAME = 63
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")
_SIDECAR_ONLY = ("restartPolicy", "startupProbe", "readinessProbe", "livenessProbe", "ports",
                 "args", "lifecycle")


def job_name(run_name: str, kind: JobKind, epoch: int, *, mark: str = "e") -> str:
    """`agentsaga-<run>-<kind>-e<epoch>`, cut to 63 characters with a hash when too long.

    The same run, kind and epoch always give the same name: a restarted operator or a peer
    that tries again gets 409 AlreadyExists instead of a second Job. (A corrections Job is
    named by the step whose correction was approved: `mark="s"`.)"""
    epoch_part = f"{mark}{epoch}"
    full = f"agentsaga-{run_name}-{kind}-{epoch_part}"
    clean = _NOT_LABEL.sub("-", full.lower()).strip("-")
    if clean == full and len(full) <= MAX_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    tail = f"-{kind}-{epoch_part}-{digest}"
    return clean[: MAX_NAME - len(tail)].rstrip("-") + tail


def label_value(value: str) -> str:
    """`value` if it is a valid label value, else a stable hashed form."""
    if len(value) <= 63 and re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return _NOT_LABEL.sub("-", value.lower())[:52].strip("-") + "-" + digest


def command(kind: JobKind, run_id: str) -> list[str]:
    if kind == "corrections":  # send what a human approved (R9)
        return ["agentsaga", "corrections", "--run", run_id, "--send"]
    return ["agentsaga", kind, "--run", run_id]


_JOB_CREDENTIAL = {"sidecar-user": "job-user", "sidecar-password": "job-password"}
"""The Secret keys of a namespace's sidecar credential, and of its Jobs' (the chart's
<release>-db-credentials): a Job logs in as the namespace's Job role, never its sidecar's."""


def _job_credential(env: Obj) -> Obj:
    ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
    if ref.get("key") not in _JOB_CREDENTIAL:
        return env
    return {**env, "valueFrom": {"secretKeyRef": {**ref, "key": _JOB_CREDENTIAL[ref["key"]]}}}


def _container(config: OperatorSettings, template: Obj | None, kind: JobKind,
               run_id: str) -> Obj:
    if template is not None:
        container = dict(copy.deepcopy(template["container"]))
        for key in _SIDECAR_ONLY:
            container.pop(key, None)
        container["env"] = [_job_credential(e) for e in container.get("env") or []]
    else:
        if not config.sidecar_image:
            raise ValueError("no image for the Job: set AGENTSAGA_SIDECAR_IMAGE or "
                             "AGENTSAGA_SIDECAR_TEMPLATE")
        secret, _, key = config.dsn_secret.partition(":")
        env = [] if not secret else [{"name": "AGENTSAGA_DSN", "valueFrom": {
            "secretKeyRef": {"name": secret, "key": key or "dsn"}}}]
        container = {"name": "agentsaga", "image": config.sidecar_image, "env": env}
    container["name"] = "agentsaga"
    container["command"] = command(kind, run_id)
    return container


def build_job(run: Obj, kind: JobKind, name: str, run_id: str, config: OperatorSettings,
              template: Obj | None) -> Obj:
    meta = run["metadata"]
    labels = {RUN_LABEL: label_value(meta["name"]), JOB_KIND_LABEL: kind,
              "app.kubernetes.io/managed-by": "agentsaga-operator"}
    pod_spec: Obj = {
        "restartPolicy": "Never",
        # reconcile and unwind write only the saga log and the real systems: no Kubernetes token
        "automountServiceAccountToken": False,
        "containers": [_container(config, template, kind, run_id)],
    }
    if template and template.get("volumes"):
        pod_spec["volumes"] = copy.deepcopy(template["volumes"])
    if config.job_service_account:
        pod_spec["serviceAccountName"] = config.job_service_account
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": {RUN_LABEL: meta["name"], "agentsaga.io/run-id": run_id},
            "ownerReferences": [{
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentRun", "name": meta["name"],
                "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": {
            "backoffLimit": config.job_backoff_limit,
            # exit 3: only a person can go on (agentsaga.cli.job_commands); running it again
            # would change nothing, so the Job fails at once and the operator says who must act
            "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                "containerName": "agentsaga", "operator": "In",
                "values": [NEEDS_HUMAN_EXIT]}}]},
            "template": {
                "metadata": {"labels": {JOB_POD_LABEL: name, JOB_KIND_LABEL: kind}},
                "spec": pod_spec,
            },
            **({"activeDeadlineSeconds": config.job_deadline_seconds}
               if config.job_deadline_seconds else {}),
            **({"ttlSecondsAfterFinished": config.job_ttl_seconds}
               if config.job_ttl_seconds else {}),
        },
    }


def outcome(job: Obj) -> str:
    """Created, Running, Succeeded or Failed, from the Job's status (the job controller's)."""
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "Succeeded"
        if cond.get("status") == "True" and cond.get("type") in ("Failed", "FailureTarget"):
            return "Failed"
    if status.get("active"):
        return "Running"
    return "Created"
