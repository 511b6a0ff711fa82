"""The webhook's caBundle, set by the operator at start from the certificate it serves.

The chart renders its MutatingWebhookConfiguration without a caBundle (nothing random at render
time: the certificate is made in the cluster by the chart's hook Job, or by cert-manager, whose
cainjector then sets the caBundle instead). With `--webhook-configuration NAME`, each replica
patches NAME's webhooks with the ca.crt of its `--webhook-cert-dir` before it serves; the
replicas mount the same Secret, so they write the same bytes. Until one has, the API server
cannot call the webhook, and with failurePolicy Fail opted-in pods are refused, as while the
operator is down.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentsaga.errors import ConfigurationError

logger = logging.getLogger(__name__)


def inject_ca_bundle(api: client.ApiClient, name: str, ca_file: Path) -> bool:
    """Set every webhook's clientConfig.caBundle of MutatingWebhookConfiguration `name` to
    `ca_file`'s PEM; False when it already was. ConfigurationError, saying what to do, when the
    file or the configuration is missing or the operator may not patch it."""
    try:
        pem = ca_file.read_bytes()
    except OSError as exc:
        raise ConfigurationError(
            f"--webhook-configuration {name}: cannot read the CA {ca_file} ({exc}); the chart "
            "mounts it from the webhook's TLS Secret") from exc
    bundle = base64.b64encode(pem).decode()
    admission = client.AdmissionregistrationV1Api(api)
    try:
        response: Any = admission.read_mutating_webhook_configuration(name,
                                                                      _preload_content=False)
    except ApiException as exc:
        raise ConfigurationError(
            f"--webhook-configuration {name}: cannot read it (HTTP {exc.status}): the chart "
            "creates it and grants the operator get and patch on it by name") from exc
    served = json.loads(response.data)
    webhooks = served.get("webhooks") or []
    if all((w.get("clientConfig") or {}).get("caBundle") == bundle for w in webhooks):
        return False
    # a JSON patch (a list): each webhook's caBundle only, at the index read, checked by name
    patch: list[dict[str, object]] = []
    for index, webhook in enumerate(webhooks):
        patch.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook["name"]})
        patch.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle",
                      "value": bundle})
    try:
        admission.patch_mutating_webhook_configuration(name, patch)
    except ApiException as exc:
        raise ConfigurationError(
            f"--webhook-configuration {name}: cannot patch its caBundle (HTTP {exc.status}): "
            "the chart grants the operator patch on it by name") from exc
    logger.info("set the caBundle of MutatingWebhookConfiguration %s", name)
    return True
