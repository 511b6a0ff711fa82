"""Build the test control plane (tests/controlplane: kube-apiserver, kube-controller-manager,
kube-scheduler, etcd, and the test node's kubelet and kube-proxy in one binary) from Go
modules, once, into a cache outside the work tree.

    python -P tools/controlplane.py build   # build it if missing, print nothing else
    python -P tools/controlplane.py path    # print the binary's path (building it if missing)
    python -P tools/controlplane.py pause   # the same for the test node's pause binary

The pause binary (tests/controlplane/pause: a process that sleeps until signalled) is what the test
node packages as its sandbox image; it is a few seconds' build, cached the same way.

No Kubernetes release binary is served by the package registries this project uses, but the Go
module proxy serves k8s.io/kubernetes and etcd's modules; so the binary is compiled here. That
takes about 8 minutes on 2 cores the first time, which is why:

- the binary is kept per content hash of what decides it (go.mod, go.sum, main.go, the Go
  version and the build flags), under `$AGENTSAGA_CACHE/controlplane/<hash>/kube`, the cache
  being `${XDG_CACHE_HOME:-~/.cache}/agentsaga` unless AGENTSAGA_CACHE names another folder;
  a second clone, a `git clean` or a new worktree reuses it;
- the Go module and build caches live beside it (`<cache>/go/mod`, `<cache>/go/build`), so even a
  rebuild after a change to main.go downloads nothing and recompiles only what changed;
- the build writes to a temporary file renamed into place only when complete (a crash leaves no
  half binary) under a file lock (concurrent builders wait for the first one and reuse its
  result);
- before a build starts, it says how long the first one takes.

The version is stamped the way Kubernetes' release builds stamp it (-X on
k8s.io/component-base/version and k8s.io/client-go/pkg/version): unstamped, the API server calls
itself v0.0.0-master and Helm's `kubeVersion` constraints refuse every chart.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "tests" / "controlplane"
SOURCES = ("go.mod", "go.sum", "main.go")
BINARY_NAME = "kube"
PAUSE_SOURCES = ("go.mod", "pause/main.go")
PAUSE_NAME = "pause"
GO_MINIMUM = (1, 26)

# Measured from an empty cache on a 2-core machine: 8.3 minutes, modules included (about
# 600 MB of them; the build cache grows to about 4 GB, and `go build` peaks near 3 GB of memory)
# for the control plane alone; the node's kubelet and kube-proxy added 2.9 minutes to a warm
# build (the control plane's packages cached). Under a load of 10 to 20 on those 2 cores, the
# whole first build took 16.6 minutes.
FIRST_BUILD = ("about 11 minutes on 2 cores (more on a loaded machine), with about 600 MB of Go "
               "modules to download")

# The parts of the link that are not in the sources; a change here is a new binary too.
VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
BUILD_FLAGS_REVISION = "1"


class BuildError(Exception):
    """The control plane cannot be built here (no Go, too old a Go, a failed build)."""


def cache_dir() -> Path:
    """`$AGENTSAGA_CACHE`, else `${XDG_CACHE_HOME:-~/.cache}/agentsaga`."""
    explicit = os.environ.get("AGENTSAGA_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "agentsaga"


def go_environment() -> dict[str, str]:
    """The environment of every `go` command here: the caches outside the work tree, a static
    binary (no C toolchain needed, runs anywhere the tests run)."""
    env = dict(os.environ)
    env["GOMODCACHE"] = str(cache_dir() / "go" / "mod")
    env["GOCACHE"] = str(cache_dir() / "go" / "build")
    env["CGO_ENABLED"] = "0"
    # The module's go.mod pins the language version; never switch toolchains behind our back.
    env.setdefault("GOTOOLCHAIN", "local")
    return env


def go_version() -> str:
    """The toolchain as `go1.26.8 linux/amd64`, after checking that it is recent enough."""
    go = shutil.which("go")
    if go is None:
        raise BuildError("`go` is not on PATH: building the test control plane needs Go >= "
                         f"{GO_MINIMUM[0]}.{GO_MINIMUM[1]} (https://go.dev/dl/)")
    result = subprocess.run([go, "env", "GOVERSION", "GOOS", "GOARCH"], capture_output=True,
                            text=True, env=go_environment(), check=False)
    if result.returncode != 0:
        raise BuildError(f"`go env` failed: {result.stderr.strip()}")
    version, goos, goarch = result.stdout.split()
    match = re.match(r"go(\d+)\.(\d+)", version)
    if match is None or (int(match[1]), int(match[2])) < GO_MINIMUM:
        raise BuildError(f"{version} is too old: building the test control plane needs Go >= "
                         f"{GO_MINIMUM[0]}.{GO_MINIMUM[1]}")
    return f"{version} {goos}/{goarch}"


def content_hash(toolchain: str, sources: tuple[str, ...] = SOURCES) -> str:
    digest = hashlib.sha256()
    for name in sources:
        data = (MODULE / name).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    digest.update(f"{toolchain}\0{BUILD_FLAGS_REVISION}".encode())
    return digest.hexdigest()[:16]


def binary_path(toolchain: str) -> Path:
    return cache_dir() / "controlplane" / content_hash(toolchain) / BINARY_NAME


def pause_path(toolchain: str) -> Path:
    return cache_dir() / "controlplane" / f"pause-{content_hash(toolchain, PAUSE_SOURCES)}" / \
        PAUSE_NAME


def kubernetes_release() -> tuple[str, str]:
    """(version, release time) of the k8s.io/kubernetes the module requires; the release time
    is the build date stamped into the binary (fixed, so the build is reproducible)."""
    result = subprocess.run(["go", "list", "-m", "-json", "k8s.io/kubernetes"], cwd=MODULE,
                            capture_output=True, text=True, env=go_environment(), check=False)
    if result.returncode != 0:
        raise BuildError(f"`go list -m k8s.io/kubernetes` failed: {result.stderr.strip()}")
    info = json.loads(result.stdout)
    return str(info["Version"]), str(info.get("Time") or "1970-01-01T00:00:00Z")


def ldflags() -> str:
    version, released = kubernetes_release()
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+.*", version)
    if match is None:
        raise BuildError(f"unexpected k8s.io/kubernetes version {version!r} in go.mod")
    stamps = {"gitVersion": version, "gitMajor": match[1], "gitMinor": match[2],
              # built from the released module, unmodified; the module carries no commit hash
              "gitTreeState": "clean", "gitCommit": "", "buildDate": released}
    flags = ["-s", "-w"]
    for package in VERSION_PACKAGES:
        flags += [f"-X {package}.{name}={value}" for name, value in stamps.items()]
    return " ".join(flags)


def build(toolchain: str, target: Path, package: str = ".") -> None:
    """Compile `package` into a temporary file beside `target`, then rename it into place."""
    if package == ".":
        print(f"building the control plane from Go modules (first build only: {FIRST_BUILD}) "
              "...", file=sys.stderr, flush=True)
    started = time.monotonic()
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    flags = ldflags() if package == "." else "-s -w"
    command = ["go", "build", "-trimpath", "-ldflags", flags, "-o", str(partial), package]
    try:
        result = subprocess.run(command, cwd=MODULE, env=go_environment(), check=False)
        if result.returncode != 0:
            raise BuildError(f"`go build` of {MODULE} failed (exit {result.returncode}); "
                             "its output is above")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    minutes = (time.monotonic() - started) / 60
    print(f"built {target} ({toolchain}) in {minutes:.1f} minutes", file=sys.stderr, flush=True)


def ensure_built(pause: bool = False) -> Path:
    """The binary's path (the pause binary's with `pause`), after building it if no builder
    has yet."""
    toolchain = go_version()
    target = pause_path(toolchain) if pause else binary_path(toolchain)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another builder finishes first; then we reuse its binary
            print(f"another build of the control plane is under way; waiting for it "
                  f"(first build only: {FIRST_BUILD}) ...", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            build(toolchain, target, "./pause" if pause else ".")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", choices=("build", "path", "pause"),
                        help="build: build both if missing; path: print the control plane's "
                             "path; pause: print the pause binary's path")
    args = parser.parse_args(argv)
    try:
        target = ensure_built(pause=args.command == "pause")
        if args.command == "build":
            ensure_built(pause=True)
    except BuildError as error:
        print(f"tools/controlplane.py: {error}", file=sys.stderr)
        return 1
    if args.command in ("path", "pause"):
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
