"""Sidecar injection: pods labelled `agentsaga.io/inject: "true"` get the agentsaga sidecar as a
native sidecar (an init container with `restartPolicy: Always`), and no ServiceAccount token
(`automountServiceAccountToken: false`) unless the pod's annotation
`agentsaga.io/service-account-token: "true"` asks for one: the sidecar needs no Kubernetes
credentials, and an agent's token is what a prompt-injected agent would use.

The chart's webhook selects pods by that label (objectSelector) with `failurePolicy: Fail`, so an
opted-in pod is never started without its sidecar while the operator is down.

Two layers:

- `sidecar_patch(pod, template)`: pure; the JSON-patch ops (RFC 6902) that add the sidecar container
  and its volumes to a pod. Idempotent: a pod that already has a container named
  `agentsaga-sidecar` gets no ops.
- `inject_sidecar`: the kopf mutating-admission handler (`POST /inject-sidecar` on the operator's
  webhook server). The container spec comes from the JSON file named by
  `AGENTSAGA_SIDECAR_TEMPLATE`, which the Helm chart renders from the same named template that
  users include by hand on clusters without webhooks, so both paths produce the same container.

`configure_admission(settings, port=..., cert_dir=...)` is what the operator's startup handler calls
to serve the webhook; TLS material (tls.crt, tls.key, ca.crt) is mounted from a Secret the chart
creates. Importing this module needs no cluster.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import jsonpatch
import kopf

from agentsaga.environment import load, name_of
from agentsaga.settings import OperatorSettings

SIDECAR_NAME = "agentsaga-sidecar"
INJECT_LABEL = "agentsaga.io/inject"
TOKEN_ANNOTATION = "agentsaga.io/service-account-token"
HANDLER_ID = "inject-sidecar"
TEMPLATE_ENV = name_of(OperatorSettings, "sidecar_template")

__all__ = [
    "HANDLER_ID",
    "INJECT_LABEL",
    "SIDECAR_NAME",
    "TEMPLATE_ENV",
    "TOKEN_ANNOTATION",
    "configure_admission",
    "inject_sidecar",
    "load_template",
    "sidecar_patch",
    "webhook_server",
]


def load_template(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a sidecar template file: `{"container": {...}, "volumes": [...]}`."""
    template = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(template, dict) or not isinstance(template.get("container"), dict):
        raise ValueError(f"{path}: a sidecar template needs a 'container' object")
    if template["container"].get("name") != SIDECAR_NAME:
        raise ValueError(f"{path}: the sidecar container must be named {SIDECAR_NAME!r}")
    if not isinstance(template.get("volumes", []), list):
        raise ValueError(f"{path}: 'volumes' must be a list")
    return template


def sidecar_patch(pod: dict[str, Any], template: dict[str, Any]) -> list[dict[str, Any]]:
    """JSON-patch ops that add the template's sidecar (first in `initContainers`, so it also serves
    later init containers) and its missing volumes to `pod`, and turn off the ServiceAccount
    token unless the pod's annotation `agentsaga.io/service-account-token: "true"` asks for it.

    No ops if the pod already has a container named `agentsaga-sidecar`."""
    spec: dict[str, Any] = pod.get("spec") or {}
    names = {c.get("name") for key in ("initContainers", "containers") for c in spec.get(key) or []}
    if SIDECAR_NAME in names:
        return []
    container = copy.deepcopy(template["container"])
    ops: list[dict[str, Any]] = []
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(TOKEN_ANNOTATION) != "true":
        ops.append({"op": "add", "path": "/spec/automountServiceAccountToken", "value": False})
    if spec.get("initContainers"):
        ops.append({"op": "add", "path": "/spec/initContainers/0", "value": container})
    else:
        ops.append({"op": "add", "path": "/spec/initContainers", "value": [container]})
    present = {v.get("name") for v in spec.get("volumes") or []}
    volumes = [copy.deepcopy(v) for v in template.get("volumes", []) if v["name"] not in present]
    if volumes and spec.get("volumes"):
        ops += [{"op": "add", "path": "/spec/volumes/-", "value": v} for v in volumes]
    elif volumes:
        ops.append({"op": "add", "path": "/spec/volumes", "value": volumes})
    return ops


_cache: dict[str, tuple[int, dict[str, Any]]] = {}


def _current_template() -> dict[str, Any]:
    """The template named by AGENTSAGA_SIDECAR_TEMPLATE, re-read when the file changes."""
    path = load(OperatorSettings, os.environ).sidecar_template
    if not path:
        raise kopf.AdmissionError(f"sidecar injection is not configured: {TEMPLATE_ENV} is unset")
    try:
        mtime = os.stat(path).st_mtime_ns
        cached = _cache.get(path)
        if cached is None or cached[0] != mtime:
            _cache[path] = (mtime, load_template(path))
        return _cache[path][1]
    except (OSError, ValueError) as exc:
        raise kopf.AdmissionError(f"sidecar template {path} is unusable: {exc}") from exc


@kopf.on.mutate(
    "v1",
    "pods",
    id=HANDLER_ID,
    operations=["CREATE"],
    labels={INJECT_LABEL: "true"},
)
def inject_sidecar(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger, **_: Any) -> None:
    """Mutating webhook: add the sidecar to a labelled pod on CREATE (reinvocation: never)."""
    ops = sidecar_patch(dict(body), _current_template())
    if not ops:
        logger.debug("pod already has %s; nothing to inject", SIDECAR_NAME)
        return
    # kopf diffs the body before and after its patch functions into the response's JSON patch
    patch.fns.append(lambda raw: jsonpatch.apply_patch(raw, ops, in_place=True))
    logger.info("injecting %s", SIDECAR_NAME)


def webhook_server(
    port: int, cert_dir: str | os.PathLike[str] | None, *, addr: str | None = None
) -> kopf.WebhookServer:
    """The admission server: HTTPS with the chart's certificate from `cert_dir` (tls.crt, tls.key,
    ca.crt); without `cert_dir`, plain HTTP on 127.0.0.1 (tests and local development)."""
    if cert_dir is None:
        return kopf.WebhookServer(addr=addr or "127.0.0.1", port=port, insecure=True)
    directory = Path(cert_dir)
    return kopf.WebhookServer(
        addr=addr or "0.0.0.0",
        port=port,
        certfile=directory / "tls.crt",
        pkeyfile=directory / "tls.key",
        cafile=directory / "ca.crt",
    )


def configure_admission(
    settings: kopf.OperatorSettings,
    *,
    port: int,
    cert_dir: str | os.PathLike[str] | None,
    addr: str | None = None,
) -> None:
    """Serve the admission handlers (call from the operator's startup handler). The chart owns the
    MutatingWebhookConfiguration, so kopf is not asked to manage one."""
    settings.admission.server = webhook_server(port, cert_dir, addr=addr)
    settings.admission.managed = None
