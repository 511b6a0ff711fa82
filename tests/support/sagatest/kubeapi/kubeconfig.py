"""A kubeconfig with a token user pointing at the stand-in."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(path: str | Path, server: str, token: str = "stand-in-token",
                     namespace: str = "default") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stand-in", "cluster": {"server": server}}],
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
