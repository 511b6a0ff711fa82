"""A local Kubernetes cluster with agentsaga in it, on this machine, from one command.

    make cluster          # .venv/bin/python -P tools/localcluster.py up
    . .cluster/env        # KUBECONFIG, PATH (kubectl, helm, kubectl agentsaga), WORLD_URL, ...
    make cluster-down     # .venv/bin/python -P tools/localcluster.py down

`up` starts a supervisor process that holds the cluster until `down`, and returns once the
refund example's agent runs in it. The supervisor runs, with the binaries and helpers of the
end-to-end tests (tests/support/sagatest/cluster, built from Go modules by `make controlplane`):

- a Postgres (the embedded one, its files in memory where there is room), reached by pods
  through a forwarder on the node's address;
- the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and one
  real node (kubelet, containerd with runc, a CNI bridge, kube-proxy);
- the stand-in vendors of the example (`agentsaga world`: payments and email), on loopback as
  `make demo` runs them, reached by pods through a forwarder too;
- the images (tools/images.py, from uv.lock; the example's sidecar image), loaded into the
  node's containerd under the names tools/cluster_install.py gives (no registry);
- then tools/cluster_install.py's install: the chart with per-namespace credentials and
  charts/agentsaga/examples/values-local.yaml, a person `dana` allowed to approve (her
  kubeconfig: .cluster/dana.kubeconfig), the agent's first run (Job refund-1-agent).

The node takes the machine-wide node lock for as long as the cluster runs: the end-to-end tests
that start a node wait for `make cluster-down` (and `make cluster` waits for them). `down` stops
the supervisor, which takes everything down; a supervisor that died is cleaned up after
(`sagatest.cluster.leftovers`: processes, cgroups, mounts, the bridge, iptables chains).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tools"))

STATE = ROOT / ".cluster"
PID = STATE / "supervisor.pid"
LOG = STATE / "cluster.log"
ENV = STATE / "env"
FACTS = STATE / "cluster.json"
APPROVER = "dana"
HOLDER = "AGENTSAGA_CLUSTER_HOLDER"
"""A process id: when that process ends, the cluster goes down too (a test that types
`make cluster` sets its own, so that a killed test run leaves no cluster holding the node lock)."""
USAGE = "usage: tools/localcluster.py up | down | supervise"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _alive(pid: int) -> bool:
    """`pid` runs, and is a supervisor of ours (not a process that took its number since)."""
    if not _process_alive(pid):
        return False
    try:
        return "localcluster.py" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return False


def _supervisor() -> int | None:
    """The running supervisor's pid, or None."""
    try:
        pid = int(PID.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def _say(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {text}", flush=True)


# -- the supervisor ----------------------------------------------------------------------


def _stop_on_signal(_: int, __: FrameType | None) -> None:
    """The first SIGTERM/SIGINT unwinds the supervisor (every `with` takes its part down);
    later ones are ignored, so that the teardown itself is not cut short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise SystemExit(0)


def supervise() -> int:
    from cluster_install import LOCAL_IMAGES, Inputs, InstallFailed, install
    from psycopg import connect
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from agentsaga.store.postgres import get_server
    from agentsaga_lab.world import World
    from sagatest.cluster.node_cluster import node_cluster_running
    from sagatest.cluster.pod_images import product_images, refund_sidecar
    from sagatest.pg_fixtures import in_memory, without_flushing

    signal.signal(signal.SIGTERM, _stop_on_signal)
    signal.signal(signal.SIGINT, _stop_on_signal)
    started = time.monotonic()
    say = lambda text: _say(started, text)  # noqa: E731
    facts: dict[str, object] = {"pid": os.getpid()}

    def remember(**more: object) -> None:
        facts.update(more)
        FACTS.write_text(json.dumps(facts, indent=1))

    with contextlib.ExitStack() as stack:
        # the images first: the first build takes minutes, and holds no lock of the node's
        say("building the images, or finding them built (tools/images.py; the first build "
            "takes minutes)")
        built = product_images()
        images = {"operator": built["operator"], "agent": built["agent"],
                  "sidecar": refund_sidecar(built["sidecar"])}
        say("the images: " + ", ".join(i.reference for i in images.values()))

        pg_dir = Path(tempfile.mkdtemp(prefix="agentsaga-local-pg-", dir=in_memory()))
        remember(pg_dir=str(pg_dir))
        server = get_server(pg_dir, cleanup_mode="stop")
        stack.callback(shutil.rmtree, pg_dir, True)
        stack.callback(server.cleanup)
        admin = server.get_uri()
        without_flushing(admin)
        with connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE agentsaga")
        params = conninfo_to_dict(admin)
        params["dbname"] = "agentsaga"
        dsn = make_conninfo(**params)  # type: ignore[arg-type]
        say(f"Postgres serves (embedded, in {pg_dir})")

        say("starting the control plane and the node (waits while another node runs on "
            "this machine)")
        cluster = stack.enter_context(node_cluster_running())
        say(f"the node is Ready at {cluster.address} "
            f"({cluster.startup_seconds:.1f} s for the control plane and the node)")
        for name, image in images.items():
            cluster.node.load_image(image.archive, LOCAL_IMAGES[name])
        say("the images are in the node's containerd: " + ", ".join(LOCAL_IMAGES.values()))

        world = stack.enter_context(World())
        world_for_pods = cluster.url_for_pods(world.url)
        pod_dsn = cluster.dsn_for_pods(dsn)
        say(f"the stand-in vendors serve on {world.url} (pods: {world_for_pods}); "
            f"Postgres for pods: {conninfo_to_dict(pod_dsn)['host']}:"
            f"{conninfo_to_dict(pod_dsn)['port']}")

        plane = cluster.kube.plane
        kubeconfig = STATE / "kubeconfig"
        shutil.copy(plane.admin_kubeconfig, kubeconfig)
        kubeconfig.chmod(0o600)
        plane.user_kubeconfig(APPROVER, path=STATE / f"{APPROVER}.kubeconfig")
        env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
        env.update(KUBECONFIG=str(kubeconfig), NO_PROXY="127.0.0.1,localhost")
        location = conninfo_to_dict(pod_dsn)
        where = f"{location['host']}:{location['port']}/{location['dbname']}"
        try:
            install(Inputs(images=dict(LOCAL_IMAGES),
                           migrate_dsn=f"postgresql://{location.get('user') or 'postgres'}"
                           f"@{where}",
                           operator_dsn=f"postgresql://agentsaga_operator@{where}",
                           location=f"postgresql://{where}", world_url=world_for_pods,
                           state=STATE, env=env, approver=APPROVER), say)
        except InstallFailed as failed:
            say(f"the install failed: {failed}")
            print("what the pods printed:\n" + cluster.node.pod_logs()[-6000:], flush=True)
            return 1

        ENV.write_text("\n".join([
            "# the local cluster of `make cluster`: `. .cluster/env` in your shell",
            f"export KUBECONFIG={kubeconfig}",
            f"export PATH={ROOT / 'tools' / 'bin'}:{ROOT / '.venv' / 'bin'}:$PATH",
            f"export WORLD_URL={world.url}",
            f"export AGENTSAGA_DSN='{dsn}'",
            f"export APPROVER_KUBECONFIG={STATE / f'{APPROVER}.kubeconfig'}",
        ]) + "\n")
        remember(node_address=cluster.address, world_url=world.url, dsn=dsn,
                 ready_seconds=round(time.monotonic() - started, 1))
        say("ready")
        holder = int(os.environ.get(HOLDER) or 0)
        while not holder or _process_alive(holder):  # until `down` (SIGTERM)
            time.sleep(1.0)
        say(f"process {holder} ({HOLDER}) ended: taking the cluster down")
    return 0


# -- up and down ---------------------------------------------------------------------------


def _tail(offset: int) -> int:
    """Print what the supervisor logged since `offset`; the new offset."""
    try:
        with LOG.open() as log:
            log.seek(offset)
            text = log.read()
    except OSError:
        return offset
    if text:
        print(text, end="", flush=True)
    return offset + len(text.encode())


def _summary() -> None:
    print(f"""
The local cluster runs (its supervisor: pid {_supervisor()}; its log: {LOG}).
In your shell:

    . .cluster/env        # KUBECONFIG, PATH (kubectl, helm, kubectl agentsaga), WORLD_URL, ...

or only the cluster's admin for kubectl:

    export KUBECONFIG={STATE / 'kubeconfig'}

then `kubectl get agentruns -n refunds`, and docs/local-cluster.md for the incident.
`make cluster-down` removes it.""", flush=True)


def up() -> int:
    running = _supervisor()
    if running is not None:
        if ENV.exists():
            print("the local cluster already runs", flush=True)
            _summary()
            return 0
        print(f"a local cluster is starting (supervisor pid {running}); wait for it, or "
              "`make cluster-down`", file=sys.stderr)
        return 1
    if STATE.exists():
        down(quiet=True)  # what a dead supervisor left
    STATE.mkdir(parents=True)
    started = time.monotonic()
    with LOG.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-P", str(Path(__file__).resolve()),
                                 "supervise"], cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    PID.write_text(f"{proc.pid}\n")
    offset = 0
    try:
        while not ENV.exists():
            offset = _tail(offset)
            if proc.poll() is not None:
                _tail(offset)
                print(f"\nthe local cluster did not start (the supervisor exited "
                      f"{proc.returncode}); its log: {LOG}. `make cluster-down` removes what "
                      "it left.", file=sys.stderr)
                return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\ninterrupted: taking the cluster down", file=sys.stderr)
        down()
        return 130
    _tail(offset)
    print(f"make cluster: {time.monotonic() - started:.0f} s", flush=True)
    _summary()
    return 0


def down(quiet: bool = False) -> int:
    from agentsaga.store.postgres import stop_embedded
    from sagatest.cluster import leftovers

    pid = _supervisor()
    facts: dict[str, object] = {}
    with contextlib.suppress(OSError, ValueError):
        facts = json.loads(FACTS.read_text())
    if pid is not None:
        print(f"stopping the local cluster (supervisor pid {pid}) ...", flush=True)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 180
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.3)
        if _alive(pid):
            print("the supervisor did not stop in 180 s: killed; its node is removed below",
                  file=sys.stderr)
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
    owner = pid or facts.get("pid")
    if owner and leftovers.STATE_DIR.exists():
        for state_file in leftovers.STATE_DIR.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                if int(json.loads(state_file.read_text())["owner"]) == owner:
                    with leftovers.node_lock("waiting for the node lock to remove the local "
                                             "cluster's node ..."):
                        leftovers.reap_dead()
                    break
    pg_dir = facts.get("pg_dir")
    if isinstance(pg_dir, str) and Path(pg_dir).exists():
        with contextlib.suppress(Exception):
            stop_embedded(Path(pg_dir))
        shutil.rmtree(pg_dir, ignore_errors=True)
    existed = STATE.exists()
    shutil.rmtree(STATE, ignore_errors=True)
    if not quiet:
        print("the local cluster is gone" if existed or pid else "no local cluster runs",
              flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["up"]:
        return up()
    if argv == ["down"]:
        return down()
    if argv == ["supervise"]:
        return supervise()
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
