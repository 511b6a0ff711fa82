"""What this machine is, for the test node: detected, never assumed.

- cgroups v1 or v2 (v1.37's kubelet refuses v1 unless told `failCgroupV1: false`);
- whether a process may lower its OOM score (CAP_SYS_RESOURCE in the capability bounding
  set): without it runc fails every pod sandbox ("can't get final child's PID from pipe: EOF")
  unless containerd is told `restrict_oom_score_adj`;
- where the CNI plugins are (Debian: /usr/lib/cni; upstream: /opt/cni/bin);
- which iptables the machine's `iptables` command drives (nf_tables or legacy), which is the
  one kube-proxy and the CNI plugins will use, so the one whose chains are cleaned up;
- whether swap is on (the kubelet refuses to start with swap unless told `failSwapOn: false`).

`missing_programs()` names what is absent, and `require()` says how to install it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CAP_SYS_RESOURCE = 24
CNI_DIRS = ("/usr/lib/cni", "/opt/cni/bin", "/usr/libexec/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
PROGRAMS = ("containerd", "ctr", "runc", "buildah", "iptables", "iptables-save", "ip")
INSTALL = "python3 -P tools/host_packages.py (as root), or apt-get install " \
    "--no-install-recommends runc containerd buildah containernetworking-plugins iptables iproute2"


class HostUnsuitable(RuntimeError):
    """The machine cannot run the test node; the message says what is missing and what to do."""


@dataclass(frozen=True)
class Host:
    cgroup_v2: bool
    can_lower_oom_score: bool
    cni_bin_dir: str
    iptables_nft: bool
    swap_on: bool

    def describe(self) -> str:
        return (f"cgroup {'v2' if self.cgroup_v2 else 'v1'}, "
                f"{'' if self.can_lower_oom_score else 'no '}CAP_SYS_RESOURCE, "
                f"CNI plugins in {self.cni_bin_dir}, "
                f"iptables {'nf_tables' if self.iptables_nft else 'legacy'}, "
                f"swap {'on' if self.swap_on else 'off'}")


def cgroup_v2() -> bool:
    """Whether /sys/fs/cgroup is the unified (v2) hierarchy; a hybrid machine (v1 controllers,
    a cgroup2 mount holding nothing) counts as v1, as the kubelet counts it."""
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


def can_lower_oom_score() -> bool:
    """Whether CAP_SYS_RESOURCE is in this process's capability bounding set."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    return False


def cni_bin_dir() -> str | None:
    for folder in CNI_DIRS:
        if all((Path(folder) / plugin).exists() for plugin in CNI_PLUGINS):
            return folder
    return None


def iptables_nft() -> bool:
    result = subprocess.run(["iptables", "--version"], capture_output=True, text=True,
                            check=False)
    return "nf_tables" in result.stdout


def swap_on() -> bool:
    try:
        return len(Path("/proc/swaps").read_text().splitlines()) > 1
    except OSError:
        return False


def missing_programs() -> list[str]:
    return [program for program in PROGRAMS if shutil.which(program) is None]


def detect() -> Host:
    """The machine's settings, or HostUnsuitable naming what is missing and what to do."""
    import os

    if os.geteuid() != 0:
        raise HostUnsuitable("the test node (containerd, kubelet) needs root: run the tests as "
                             "root (CI does), or keep to the tests that need no pod")
    absent = missing_programs()
    plugins = cni_bin_dir()
    if absent or plugins is None:
        what = absent + ([] if plugins else [f"the CNI plugins {', '.join(CNI_PLUGINS)} "
                                             f"(looked in {', '.join(CNI_DIRS)})"])
        raise HostUnsuitable(f"the test node needs {', '.join(what)}: install them with "
                             f"{INSTALL}")
    return Host(cgroup_v2=cgroup_v2(), can_lower_oom_score=can_lower_oom_score(),
                cni_bin_dir=plugins, iptables_nft=iptables_nft(), swap_on=swap_on())
