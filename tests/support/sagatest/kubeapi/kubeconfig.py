"""A kubeconfig with a token user pointing at the stand-in (HTTPS, its certificate trusted)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from .auth import ADMIN_TOKEN
from .tls import certificate


def write_kubeconfig(path: str | Path, server: str, token: str = ADMIN_TOKEN,
                     namespace: str = "default") -> Path:
    """`token` defaults to the stand-in's admin (system:masters); see `KubeStandIn.add_token`."""
    ca = base64.b64encode(certificate()[0]).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stand-in",
                      "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "tester", "user": {"token": token}}],
        "contexts": [{"name": "stand-in",
                      "context": {"cluster": "stand-in", "user": "tester",
                                  "namespace": namespace}}],
        "current-context": "stand-in",
        "preferences": {},
    }
    target = Path(path)
    target.write_text(yaml.safe_dump(config))
    return target
