"""The test node leaves nothing behind, even when the test process is killed outright.

A child process starts a control plane with a real node (`sagatest.cluster.node`), runs a pod
on it and is then SIGKILLed: no `finally`, no atexit. Its watchdog sees its pipe close and
removes what the node made: the pod's processes (the shims and containers live in their own
sessions, so they outlive their parent), the kubelet's cgroups, every mount under the node's
folder, the CNI bridge, the KUBE-*/CNI-* iptables chains, the state file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sagatest.cluster import leftovers
from sagatest.cluster.node import BRIDGE, CGROUP

pytestmark = pytest.mark.real_node  # in a child process of its own

CHILD = """
import json, sys, time
from sagatest.cluster.node_cluster import node_cluster_running
from sagatest.cluster.node import PAUSE_IMAGE
with node_cluster_running() as cluster:
    kube = cluster.kube
    kube.create({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "sleeper", "namespace": "default"},
                 "spec": {"containers": [{"name": "pause", "image": PAUSE_IMAGE,
                                          "imagePullPolicy": "Never"}]}})
    def ready(pod):
        conditions = ((pod or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    kube.wait_for("v1", "pods", "default", "sleeper", ready, timeout=60)
    print(json.dumps({"folder": str(cluster.node.folder),
                      "seconds": cluster.startup_seconds}), flush=True)
    time.sleep(600)
"""


def _mounts_under(folder: str) -> list[str]:
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith(folder)]


def _processes_mentioning(folder: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if folder in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _what_is_left(folder: str) -> dict[str, object]:
    bridge = subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0
    chains = [line for table in ("filter", "nat")
              for line in subprocess.run(["iptables-save", "-t", table], capture_output=True,
                                         text=True).stdout.splitlines()
              if line.startswith((":KUBE-", ":CNI-"))]
    cgroups = [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{CGROUP}")] + [
        str(p) for p in Path("/sys/fs/cgroup").glob(CGROUP)]
    return {"bridge": bridge, "chains": chains, "cgroups": cgroups,
            "mounts": _mounts_under(folder), "processes": _processes_mentioning(folder),
            "folder": Path(folder).exists(),
            "state files": [p.name for p in leftovers.STATE_DIR.glob("*.json")]}


def test_a_killed_test_process_leaves_no_node_behind() -> None:
    child = subprocess.Popen([sys.executable, "-P", "-c", CHILD], stdout=subprocess.PIPE,
                             text=True, env={**os.environ})
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"the child did not start its node (exit {child.wait()})"
    started = json.loads(line)
    folder = started["folder"]
    running = _what_is_left(folder)
    assert running["bridge"] and running["chains"] and running["cgroups"], running
    assert running["mounts"] and running["processes"], running

    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    # The watchdog removes the state file last; then, holding the machine's node lock (so no
    # node of another test process runs meanwhile: the bridge, chains and cgroups have one
    # name per machine), nothing of a node may be left
    state_file = leftovers.STATE_DIR / f"{Path(folder).name}.json"
    deadline = time.monotonic() + 120
    while state_file.exists():
        assert time.monotonic() < deadline, f"not torn down: {_what_is_left(folder)}"
        time.sleep(0.2)
    empty = {"bridge": False, "chains": [], "cgroups": [], "mounts": [], "processes": [],
             "folder": False, "state files": []}
    with leftovers.node_lock():
        assert _what_is_left(folder) == empty
