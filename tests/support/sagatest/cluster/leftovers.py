"""What a test node leaves on the machine, and its removal, even after the test process died.

A node is containerd, a kubelet and kube-proxy, and what they create outside their folder: the
containerd shims and the pods' processes (in their own sessions, so they outlive their parent),
the cgroups under the kubelet's cgroup root, mounts (the kubelet's root dir, the pods' volumes,
the containers' root filesystems, the sandboxes' network namespaces), the CNI bridge and its
veths, and iptables chains (KUBE-*: kube-proxy's and the kubelet's; CNI-*). Before it creates
any of it, the node writes a state file under STATE_DIR saying what it will create; `teardown`
removes everything a state file names, and is idempotent.

Three moments run it: the node's `stop()`; a watchdog process the node starts, which waits on a
pipe from the test process and tears the node down when that pipe closes without a goodbye (the
test process was killed: SIGKILL, an OOM kill); and the next node's start, which reaps the
state files of nodes whose owner is gone (the watchdog was killed too). All three hold the
machine-wide node lock: one test node runs on a machine at a time (two kube-proxies would
rewrite each other's KUBE-SERVICES chain).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE_DIR = Path("/run/agentsaga-node")
LOCK = STATE_DIR / "lock"
MNT_DETACH = 2
CGROUP_ROOT = Path("/sys/fs/cgroup")
CHAIN_PREFIXES = ("KUBE-", "CNI-")
TABLES = ("filter", "nat", "mangle")


@contextlib.contextmanager
def node_lock(wait_message: str | None = None) -> Iterator[int]:
    """The machine-wide node lock (held for a node's whole life by its test process)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if wait_message:
                print(wait_message, file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def write_state(path: Path, state: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(state, indent=1))
    partial.replace(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def _kill_mentioning(marker: str) -> int:
    """SIGKILL every process whose command line mentions `marker` (a path of this node only:
    its containerd socket, its folder); how many there were."""
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if marker in _cmdline(int(entry.name)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


def _cgroup_dirs(name: str) -> list[Path]:
    """The folders of cgroup `name` (under the root) in every hierarchy (v1: one per
    controller; v2: one)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / name]
    found = []
    for hierarchy in CGROUP_ROOT.iterdir():
        candidate = hierarchy / name
        if hierarchy.is_dir() and not hierarchy.is_symlink() and candidate.is_dir():
            found.append(candidate)
    return found


def _kill_cgroups(name: str, timeout: float = 10.0) -> None:
    """Kill every process in cgroup `name` and its children, then remove them bottom-up."""
    deadline = time.monotonic() + timeout
    for top in _cgroup_dirs(name):
        folders = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        folders.append(top)
        while True:
            pids: set[int] = set()
            for folder in folders:
                with contextlib.suppress(OSError):
                    pids.update(int(x) for x in (folder / "cgroup.procs").read_text().split())
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not pids or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for folder in folders:
            with contextlib.suppress(OSError):
                folder.rmdir()


def make_cgroup(name: str) -> None:
    """Create cgroup `name` in every hierarchy (the kubelet wants its cgroup root to exist); a
    v1 cpuset gets its parent's cpus and mems, or no process could join it."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        (CGROUP_ROOT / name).mkdir(exist_ok=True)
        return
    for hierarchy in CGROUP_ROOT.iterdir():
        if not hierarchy.is_dir() or hierarchy.is_symlink():
            continue
        folder = hierarchy / name
        if (hierarchy / "tasks").exists() or (hierarchy / "cgroup.procs").exists():
            folder.mkdir(exist_ok=True)
        for setting in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / setting).exists():
                (folder / setting).write_text((hierarchy / setting).read_text())


def _umount_under(*roots: Path) -> None:
    """Detach every mount at or under `roots`, deepest first."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    prefixes = [str(r.resolve()) for r in roots if str(r)]
    for _ in range(5):
        mounts = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if any(point == p or point.startswith(p + "/") for p in prefixes):
                mounts.append(point)
        if not mounts:
            return
        for point in sorted(set(mounts), key=len, reverse=True):
            libc.umount2(point.encode(), MNT_DETACH)


def _sweep_iptables(subnet: str) -> None:
    """Remove the KUBE-* chains (kube-proxy's, the kubelet's) and the CNI-* chains that name
    this node's subnet, with the jumps to them, in every table, for IPv4 and IPv6."""
    for family in ("iptables", "ip6tables"):
        if shutil.which(f"{family}-save") is None:
            continue
        for table in TABLES:
            saved = subprocess.run([f"{family}-save", "-t", table], capture_output=True,
                                   text=True, check=False).stdout
            rules: dict[str, list[str]] = {}
            for line in saved.splitlines():
                if line.startswith("-A "):
                    rules.setdefault(line.split()[1], []).append(line)
            ours = set()
            for line in saved.splitlines():
                if line.startswith(":") and line[1:].startswith(CHAIN_PREFIXES):
                    chain = line[1:].split()[0]
                    if chain.startswith("KUBE-") or any(subnet in rule
                                                        for rule in rules.get(chain, [])):
                        ours.add(chain)
            if not ours:
                continue
            script = [f"*{table}"]
            for line in saved.splitlines():
                parts = line.split()
                if line.startswith("-A ") and parts[1] not in ours and any(
                        f"-j {c}" in line or f"-g {c}" in line for c in ours):
                    script.append("-D " + line[3:])
            script += [f"-F {c}" for c in sorted(ours)] + [f"-X {c}" for c in sorted(ours)]
            script.append("COMMIT")
            subprocess.run([f"{family}-restore", "--noflush"], input="\n".join(script) + "\n",
                           capture_output=True, text=True, check=False)


def teardown(state_file: Path) -> None:
    """Remove everything `state_file` names (processes, cgroups, mounts, the bridge, iptables
    chains, the node's folder), then the state file. Idempotent; the caller holds the lock."""
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        state_file.unlink(missing_ok=True)
        return
    folder = Path(state["folder"])
    for pid in state.get("pids", []):
        if _alive(pid) and str(folder) in _cmdline(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _kill_mentioning(str(folder))  # the shims name containerd's socket, in the folder
    _kill_cgroups(state["cgroup_root"])
    _umount_under(folder, Path(state["containerd_root"]))
    subprocess.run(["ip", "link", "delete", state["bridge"]], capture_output=True, check=False)
    # the kubelet links every container's log into /var/log/containers, whatever its folders
    for link in Path("/var/log/containers").glob("*.log"):
        with contextlib.suppress(OSError):
            if os.readlink(link).startswith(str(folder)):
                link.unlink()
    _sweep_iptables(state["subnet"])
    shutil.rmtree(folder, ignore_errors=True)
    state_file.unlink(missing_ok=True)


def reap_dead() -> list[str]:
    """Tear down every node whose owner is gone (the caller holds the lock); their folders."""
    reaped = []
    for state_file in sorted(STATE_DIR.glob("*.json")):
        try:
            owner = int(json.loads(state_file.read_text())["owner"])
        except (OSError, ValueError, KeyError):
            owner = 0
        if owner and _alive(owner) and owner != os.getpid():
            continue
        reaped.append(state_file.stem)
        teardown(state_file)
    return reaped


def watchdog(state_file: Path, lock_fd: int) -> None:
    """Block until stdin (a pipe from the test process) closes; if the node's state file is
    still there then, its owner died without stopping it: tear it down. `lock_fd` is the node
    lock's open file, inherited from the node: the lock is held until this process ends."""
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    if state_file.exists():
        teardown(state_file)
    os.close(lock_fd)


if __name__ == "__main__":
    watchdog(Path(sys.argv[1]), int(sys.argv[2]))
