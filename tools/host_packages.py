"""Install the machine's packages the image builds and the test node need, from Debian, when absent.

    python3 -P tools/host_packages.py          # install what is missing (root), else do nothing
    python3 -P tools/host_packages.py --check  # exit 1 and name what is missing; install nothing

The product's images are built without Docker (tools/images.py): `mmdebstrap` makes a
Debian-packaged Python base, `buildah` builds the Dockerfiles on it with `runc` (buildah's default,
crun, fails on this kind of machine's cgroup v1), `skopeo` inspects the archives. The test node
runs pods with `containerd`, `runc` and the CNI plugins (`containernetworking-plugins`), and
routes Services with kube-proxy, which writes `iptables` rules (as the CNI plugins do).

Idempotent and quick: `dpkg-query` says what is installed; only when a package is missing does it
run `apt-get update` once and `apt-get install --no-install-recommends` (about 30 s), waiting for
another apt to finish rather than failing on its lock. CI runs as root on a fresh Debian 12
machine; elsewhere it says what to install and by which command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

PACKAGES = (
    "buildah",
    "mmdebstrap",
    "runc",
    "containerd",
    "containernetworking-plugins",
    "iptables",
    "skopeo",
)
"""What the image builds (tools/images.py) and the test node (containerd, runc, CNI) need."""

APT_LOCK_WAIT_S = 600
"""How long apt-get waits for another apt or dpkg to release its lock."""


def missing(packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """The packages of `packages` that dpkg does not have installed (all of them without dpkg)."""
    if shutil.which("dpkg-query") is None:
        return list(packages)
    result = subprocess.run(
        ["dpkg-query", "--show", "--showformat", "${Package} ${db:Status-Abbrev}\n", *packages],
        capture_output=True, text=True, check=False)
    installed = {line.split()[0] for line in result.stdout.splitlines()
                 if len(line.split()) >= 2 and line.split()[1].startswith("ii")}
    return [name for name in packages if name not in installed]


def install(names: list[str]) -> None:
    """`apt-get update` then `apt-get install` of `names`; a clear error when that cannot be."""
    command = "apt-get install -y --no-install-recommends " + " ".join(names)
    if shutil.which("apt-get") is None:
        raise SystemExit(f"tools/host_packages.py: {', '.join(names)} missing and this machine "
                         f"has no apt-get: install them with its package manager (on Debian: "
                         f"{command})")
    if os.geteuid() != 0:
        raise SystemExit(f"tools/host_packages.py: {', '.join(names)} missing: run as root "
                         f"(sudo {command}, or sudo make test)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}"]
    print(f"installing {' '.join(names)} from Debian (first run only: about 30 s) ...",
          file=sys.stderr, flush=True)
    subprocess.run(["apt-get", *wait, "update", "-qq"], env=env, check=True)
    subprocess.run(["apt-get", *wait, "install", "-y", "-qq", "--no-install-recommends", *names],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    still = missing(tuple(names))
    if still:
        raise SystemExit(f"tools/host_packages.py: apt-get did not install {', '.join(still)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true",
                        help="only say what is missing (exit 1 if anything is)")
    args = parser.parse_args(argv)
    absent = missing()
    if not absent:
        return 0
    if args.check:
        print(f"missing: {' '.join(absent)}", file=sys.stderr)
        return 1
    install(absent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
