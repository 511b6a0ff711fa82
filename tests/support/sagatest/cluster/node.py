"""The test node: a real kubelet, containerd with runc, a CNI bridge and kube-proxy on this
machine, so the pods the scheduler binds to it really run, from images.

A node comes in two steps, because the API server must serve on the node's network:

    node = Node(workdir)            # the lock, the leftovers of dead nodes reaped
    address = node.prepare()        # the bridge and its gateway address (the node's IP)
    plane = ControlPlane(node_address=address)   # serves there too; certificates name it
    plane.start()
    node.start(plane)               # containerd, kubelet, kube-proxy; Ready, untainted
    node.load_image(archive, "docker.io/library/agentsaga-sidecar:test")
    ...
    node.stop()                     # everything it made is gone

What it needs of the machine is detected (`sagatest.cluster.host`): cgroup v1 (`failCgroupV1:
false`), no CAP_SYS_RESOURCE (containerd's `restrict_oom_score_adj`), the CNI plugins' folder,
iptables' flavour, swap. Its settings:

- containerd from a private config: its socket and state in the node's folder, its root (the
  image store) in the cache (`$AGENTSAGA_CACHE/node/containerd`: images imported once, kept
  across sessions), the CRI plugin's sandbox image a pause binary of this repository's
  (tests/controlplane/pause, packaged FROM scratch by buildah), no registry;
- one CNI network: a bridge `agentsaga0` on a private /24 that no route of the machine uses,
  host-local addresses, no masquerading (pods reach the host's services on the gateway
  address, which is the node's IP and where the API server also listens);
- the kubelet as `system:node:agentsaga-node` (a client certificate in `system:nodes`, so the
  Node authorizer and NodeRestriction apply), serving with a certificate of the cluster's CA
  for its IP, its cgroups under `/agentsaga-node`, its root, pod logs and plugins in the node's
  folder; it registers tainted not-ready, and no node-lifecycle controller runs, so the node
  removes that taint itself once the kubelet reports Ready;
- kube-proxy (iptables mode) as `system:kube-proxy`, so Services route: the `kubernetes`
  Service to the API server, the webhook's Service to the operator's pod.

Everything is removed at `stop()`, or by the watchdog or the next node when the test process
died (`sagatest.cluster.leftovers`). One node runs on a machine at a time: `Node()` waits for
the machine-wide lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from sagatest.cluster import host, leftovers
from sagatest.cluster.binary import BUILDER, control_plane_binary
from sagatest.cluster.processes import Component, ComponentFailed, free_port

if TYPE_CHECKING:
    from sagatest.cluster.control_plane import ControlPlane

NAME = "agentsaga-node"
BRIDGE = "agentsaga0"
CGROUP = "agentsaga-node"
PAUSE_IMAGE = "localhost/agentsaga-pause:1"
SUBNETS = [f"10.{second}.{third}.0/24" for second in (213, 214) for third in range(0, 256, 7)]
READY_TIMEOUT = 60.0
CRI_VERSION = "/runtime.v1.RuntimeService/Version"  # an empty request is a valid one
Obj = dict[str, Any]


def cache_dir() -> Path:
    explicit = os.environ.get("AGENTSAGA_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "agentsaga"


def _run(*command: str, input: str | None = None) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True, input=input,
                          check=False)
    if done.returncode != 0:
        raise ComponentFailed(f"`{' '.join(command)}` failed (exit {done.returncode}): "
                              f"{done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of SUBNETS that overlaps no address or route of this machine."""
    used = []
    for line in _run("ip", "-4", "-o", "route", "show", "table", "all").splitlines():
        word = line.split()[0]
        if word in ("broadcast", "local", "unreachable", "blackhole"):
            word = line.split()[1]
        with contextlib.suppress(ValueError):
            used.append(ipaddress.ip_network(word if word != "default" else "0.0.0.0/32",
                                             strict=False))
    for line in _run("ip", "-4", "-o", "addr").splitlines():
        used.append(ipaddress.ip_interface(line.split()[3]).network)
    for candidate in SUBNETS:
        network = ipaddress.IPv4Network(candidate)
        if not any(network.overlaps(u) for u in used if u.prefixlen > 0):
            return network
    raise ComponentFailed(f"no free /24 for the test node's bridge among {SUBNETS[0]}...")


def pause_archive() -> Path:
    """The pause image as an OCI archive, built once per pause binary: the binary from
    tests/controlplane/pause (tools/controlplane.py), packaged FROM scratch by buildah."""
    done = subprocess.run([sys.executable, "-P", str(BUILDER), "pause"], stdout=subprocess.PIPE,
                          text=True, check=False)
    if done.returncode != 0:
        raise ComponentFailed(f"{BUILDER} pause failed (exit {done.returncode}); see stderr")
    binary = Path(done.stdout.strip())
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:16]
    archive = cache_dir() / "node" / f"pause-{digest}.tar"
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    storage = Path(tempfile.mkdtemp(prefix="agentsaga-buildah-"))
    buildah = ["buildah", "--root", str(storage / "root"), "--runroot", str(storage / "run"),
               "--storage-driver", "vfs"]
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    try:
        container = _run(*buildah, "from", "scratch").strip()
        _run(*buildah, "copy", "--chmod", "0755", container, str(binary), "/pause")
        _run(*buildah, "config", "--entrypoint", '["/pause"]', "--user", "65535:65535",
             container)
        _run(*buildah, "commit", "--quiet", container, f"oci-archive:{partial}:{PAUSE_IMAGE}")
        partial.replace(archive)
    finally:
        partial.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            subprocess.run([*buildah, "rm", "--all"], capture_output=True, check=False)
        # vfs layers may hold read-only folders; buildah's own files, not a mount
        subprocess.run(["rm", "-rf", str(storage)], check=False)
    return archive


def _archive_reference(archive: Path) -> str | None:
    """The image reference an OCI archive's index names (what `ctr import` calls it)."""
    index: Obj = {}
    with tarfile.open(archive) as tar:
        for entry in tar:
            if entry.name.removeprefix("./") == "index.json":
                member = tar.extractfile(entry)
                index = json.loads(member.read()) if member is not None else {}
                break
    for manifest in index.get("manifests") or []:
        name = (manifest.get("annotations") or {}).get("org.opencontainers.image.ref.name")
        if name:
            return str(name)
    return None


def _full_reference(name: str) -> str:
    """`x:tag` as containerd keeps it (docker.io/library/x:tag); a full one unchanged."""
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"


class Node:
    """One real node (see the module's docstring)."""

    def __init__(self, workdir: Path | None = None, *, binary: Path | None = None) -> None:
        self.machine = host.detect()
        self._binary = binary
        self._lock = leftovers.node_lock(
            "another test node runs on this machine (one at a time); waiting for it ...")
        self._lock_fd: int | None = None
        self.folder = Path(tempfile.mkdtemp(prefix="agentsaga-node-", dir=workdir))
        self.containerd_root = cache_dir() / "node" / "containerd"
        self.socket = self.folder / "containerd.sock"
        self.state_file = leftovers.STATE_DIR / f"{self.folder.name}.json"
        self.subnet: ipaddress.IPv4Network | None = None
        self.address = ""
        self.components: dict[str, Component] = {}
        self._watchdog: subprocess.Popen[bytes] | None = None
        self.plane: ControlPlane | None = None
        self.timings: dict[str, float] = {}

    @property
    def binary(self) -> Path:
        if self._binary is None:
            self._binary = control_plane_binary()
        return self._binary

    # -- the network, before the control plane -------------------------------------------

    def prepare(self) -> str:
        """Take the machine's node lock, reap dead nodes' leftovers, create the bridge; the
        node's IP (the bridge's gateway address), where the API server must also serve."""
        self._lock_fd = self._lock.__enter__()
        try:
            leftovers.reap_dead()
            self.subnet = _free_subnet()
            self.address = str(next(self.subnet.hosts()))
            self.containerd_root.mkdir(parents=True, exist_ok=True)
            self._save()
            self._start_watchdog()
            _run("ip", "link", "add", "name", BRIDGE, "type", "bridge")
            _run("ip", "addr", "add", f"{self.address}/{self.subnet.prefixlen}", "dev", BRIDGE)
            _run("ip", "link", "set", BRIDGE, "up")
        except BaseException:
            self.stop()
            raise
        return self.address

    def _save(self) -> None:
        assert self.subnet is not None
        leftovers.write_state(self.state_file, {
            "owner": os.getpid(), "folder": str(self.folder), "bridge": BRIDGE,
            "subnet": str(self.subnet), "cgroup_root": CGROUP,
            "containerd_root": str(self.containerd_root),
            "pids": [c.pid for c in self.components.values() if c.pid]})

    def _start_watchdog(self) -> None:
        """A process that tears this node down if the test process dies without stopping it
        (it waits on a pipe that only the kernel closes then). It shares the node lock's open
        file: the lock stays held until the watchdog is done too, so no other node starts
        before a dead one is torn down."""
        assert self._lock_fd is not None
        self._watchdog = subprocess.Popen(
            [sys.executable, "-P", "-m", "sagatest.cluster.leftovers", str(self.state_file),
             str(self._lock_fd)],
            pass_fds=(self._lock_fd,), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])})

    # -- the node ------------------------------------------------------------------------

    def start(self, plane: ControlPlane) -> None:
        """containerd, the pause image, the kubelet and kube-proxy; returns once the Node is
        Ready and untainted."""
        assert self.subnet is not None, "prepare() first"
        self.plane = plane
        started = time.monotonic()
        try:
            leftovers.make_cgroup(CGROUP)
            self._write_configuration(plane)
            self._launch("containerd", ["containerd", "--config",
                                        str(self.folder / "containerd.toml")])
            self._wait("containerd", "to answer on its socket", self._containerd_up, 30)
            self._wait("containerd", "to serve the CRI (what the kubelet validates first)",
                       self._cri_serving, 30)
            self.load_image(pause_archive(), PAUSE_IMAGE)
            self._launch("kubelet", [str(self.binary), "kubelet",
                                     f"--config={self.folder / 'kubelet.json'}",
                                     f"--kubeconfig={self.folder / 'kubelet.kubeconfig'}",
                                     f"--root-dir={self.folder / 'kubelet'}",
                                     f"--cert-dir={self.folder / 'kubelet-pki'}",
                                     f"--hostname-override={NAME}",
                                     f"--node-ip={self.address}"])
            self._launch("kube-proxy", [str(self.binary), "kube-proxy",
                                        f"--config={self.folder / 'kube-proxy.json'}"])
            self._wait("kubelet", "to report the Node Ready", self._ready, READY_TIMEOUT)
            plane.untaint_node(NAME)
            self._wait("kube-proxy", "to route the kubernetes Service", self._proxying,
                       READY_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        self.timings["node start"] = time.monotonic() - started

    def _write_configuration(self, plane: ControlPlane) -> None:
        assert self.subnet is not None
        folder = self.folder
        for sub in ("cni", "containerd-state", "pod-logs", "volume-plugins", "kubelet",
                    "kubelet-pki", "ipam"):
            (folder / sub).mkdir(exist_ok=True)
        (folder / "cni" / "10-agentsaga.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "agentsaga", "plugins": [{
                "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "dataDir": str(folder / "ipam"),
                         "ranges": [[{"subnet": str(self.subnet),
                                      "gateway": self.address}]],
                         "routes": [{"dst": "0.0.0.0/0"}]}}]}))
        runc = shutil.which("runc") or "runc"
        (folder / "containerd.toml").write_text(f"""version = 2
root = "{self.containerd_root}"
state = "{folder / 'containerd-state'}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = {str(not self.machine.can_lower_oom_score).lower()}
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{self.machine.cni_bin_dir}"
    conf_dir = "{folder / 'cni'}"
    max_conf_num = 1
""")
        serving = plane.server_authority.serving(NAME, [self.address, NAME])
        serving.write(folder / "kubelet-pki" / "kubelet.crt",
                      folder / "kubelet-pki" / "kubelet.key")
        plane.user_kubeconfig(f"system:node:{NAME}", ["system:nodes"], name="kubelet",
                              path=folder / "kubelet.kubeconfig")
        plane.user_kubeconfig("system:kube-proxy", name="kube-proxy",
                              path=folder / "kube-proxy.kubeconfig")
        kubelet: Obj = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{CGROUP}", "cgroupsPerQOS": True,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.address, "port": free_port(), "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
            "tlsCertFile": str(folder / "kubelet-pki" / "kubelet.crt"),
            "tlsPrivateKeyFile": str(folder / "kubelet-pki" / "kubelet.key"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(plane.pki / "client-ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "podLogsDir": str(folder / "pod-logs"),
            "volumePluginDir": str(folder / "volume-plugins"),
            "failSwapOn": not self.machine.swap_on,
            # a busy shared machine must not make the node evict the tests' pods
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "staticPodPath": "", "maxPods": 110,
            "shutdownGracePeriod": "0s", "nodeStatusReportFrequency": "10s",
            "resolvConf": "/etc/resolv.conf",
        }
        if not self.machine.cgroup_v2:
            kubelet["failCgroupV1"] = False  # 1.37 refuses cgroup v1 unless told; v1 here
        (folder / "kubelet.json").write_text(json.dumps(kubelet, indent=1))
        (folder / "kube-proxy.json").write_text(json.dumps({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "iptables", "hostnameOverride": NAME, "bindAddress": self.address,
            "clientConnection": {"kubeconfig": str(folder / "kube-proxy.kubeconfig")},
            "clusterCIDR": str(self.subnet),
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # leave the machine's conntrack settings and route_localnet alone
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            "iptables": {"localhostNodePorts": False, "syncPeriod": "5s",
                         "minSyncPeriod": "0s"},
            "nodePortAddresses": [f"{self.address}/32"],
        }, indent=1))

    def _launch(self, name: str, command: list[str]) -> None:
        component = Component(name, command, self.folder / f"{name}.log")
        self.components[name] = component
        component.start()
        self._save()

    def _wait(self, name: str, what: str, ready: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for component in self.components.values():
                component.check()
            try:
                if ready():
                    return
            except (OSError, ValueError, subprocess.SubprocessError):
                pass
            if time.monotonic() > deadline:
                raise self.components[name].failure(f"did not become ready ({what}) within "
                                                    f"{timeout:g} s")
            time.sleep(0.1)

    def ctr(self, *args: str) -> str:
        """`ctr` against this node's containerd, in the CRI's namespace."""
        return _run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args)

    def _containerd_up(self) -> bool:
        return self.socket.exists() and bool(self.ctr("version"))

    def _cri_serving(self) -> bool:
        """The CRI plugin answers `RuntimeService/Version`: containerd's own API is up before
        the CRI has initialized, and until then the CRI answers "server is not initialized yet",
        which the kubelet takes as fatal at its start."""
        with grpc.insecure_channel(f"unix://{self.socket}") as channel:
            version = channel.unary_unary(CRI_VERSION)
            try:
                version(b"", timeout=2)
            except grpc.RpcError:
                return False
        return True

    def _ready(self) -> bool:
        assert self.plane is not None
        node = self.plane.get_json(f"/api/v1/nodes/{NAME}")
        conditions = ((node or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _proxying(self) -> bool:
        """kube-proxy has written the `kubernetes` Service's rule."""
        saved = _run("iptables-save", "-t", "nat")
        return "default/kubernetes:https" in saved and "KUBE-SVC-" in saved

    # -- images --------------------------------------------------------------------------

    def load_image(self, archive: Path, name: str) -> None:
        """Import an OCI archive into containerd as `name` (a full reference:
        docker.io/library/x:tag for `x:tag`), unless this very archive already is there;
        containerd's store is kept across sessions, so this is once per archive."""
        started = time.monotonic()
        stat = archive.stat()
        key = (f"{archive.resolve()}:{stat.st_size}:{int(stat.st_mtime)}:"
               f"{_archive_reference(archive)}")
        marks_file = self.containerd_root / "agentsaga-imported.json"
        marks: dict[str, str] = {}
        with contextlib.suppress(OSError, ValueError):
            marks = json.loads(marks_file.read_text())
        present = set(self.ctr("images", "list", "--quiet").split())
        if marks.get(name) == key and name in present:
            return
        source = _archive_reference(archive)
        if source is None:
            raise ComponentFailed(f"{archive} names no image (index.json has no "
                                  "org.opencontainers.image.ref.name)")
        self.ctr("images", "import", str(archive))
        if _full_reference(source) != name:  # another name: the same image under it too
            self.ctr("images", "tag", "--force", _full_reference(source), name)
        marks[name] = key
        marks_file.write_text(json.dumps(marks, indent=1))
        self.timings[f"import {name}"] = time.monotonic() - started

    # -- logs ----------------------------------------------------------------------------

    def container_log(self, namespace: str, pod: str, container: str = "*") -> str:
        """What a pod's container printed (all its runs; every container's by default), from
        the kubelet's pod log folder (CRI format: time, stream, tag, text)."""
        text = []
        for folder in sorted((self.folder / "pod-logs").glob(f"{namespace}_{pod}_*")):
            for log in sorted(folder.glob(f"{container}/*.log")):
                text.append(log.read_text(errors="replace"))
        return "".join(text)

    def pod_logs(self, namespace: str = "*") -> str:
        """Every container's log of the pods of `namespace` (every namespace by default), each
        under its pod's and container's name: for a failure's message."""
        parts = []
        for log in sorted((self.folder / "pod-logs").glob(f"{namespace}_*/*/*.log")):
            parts.append(f"--- {log.parent.parent.name} {log.parent.name}:\n"
                         + log.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def log(self, component: str) -> Path:
        return self.folder / f"{component}.log"

    # -- the end -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop kube-proxy, the kubelet and containerd, then remove everything the node
        made (pods' processes, cgroups, mounts, the bridge, the chains); release the lock."""
        for name in ("kube-proxy", "kubelet", "containerd"):
            component = self.components.pop(name, None)
            if component is not None:
                component.stop(grace=2.0)
        if self._lock_fd is not None:
            keep = os.environ.get("AGENTSAGA_KEEP_CLUSTER") == "1"
            if keep:
                logs = Path(tempfile.mkdtemp(prefix="agentsaga-node-logs-"))
                for log in self.folder.glob("*.log"):
                    shutil.copy(log, logs / log.name)
                print(f"the node's logs are in {logs}", file=sys.stderr)
            leftovers.teardown(self.state_file)
            self._lock.__exit__(None, None, None)
            self._lock_fd = None
        if self._watchdog is not None:
            assert self._watchdog.stdin is not None
            self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=10)
            self._watchdog = None
        shutil.rmtree(self.folder, ignore_errors=True)


__all__ = ["NAME", "Node", "pause_archive"]
