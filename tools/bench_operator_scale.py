"""`agentsaga bench --operator-scale N` against a throw-away real control plane, in one command.

    make bench-operator-scale N=10000 [BENCH_ARGS="--quick --no-peers --log-rows 0"]
    .venv/bin/python -P tools/bench_operator_scale.py 10000 [agentsaga bench flags...]

Starts the control plane of this repository's tests (kube-apiserver, etcd and the controllers,
built from Go modules by `make controlplane`; tests/support/sagatest/cluster) serving the CRDs
of crds/, puts the real `kubectl proxy` (tools/bin) in front of it, as the operator of a real
cluster would give the bench, runs `agentsaga bench --operator-scale N --kube-url ...` with the
other flags given, and stops the proxy and the control plane whatever the bench did. The
bench's exit code is this command's. The product never imports the test support: this tool is
the only place where the bench and it meet, outside the tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from sagatest.cluster.control_plane import ControlPlane  # noqa: E402  (the path above)
from sagatest.cluster.kube import KUBECTL, Kube, kubectl_proxy  # noqa: E402

CRDS = ROOT / "crds"

USAGE = "usage: tools/bench_operator_scale.py N [agentsaga bench flags...]"


def main(argv: list[str]) -> int:
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        print(f"{USAGE}\nN: how many AgentRuns to create (a whole number, at least 1)",
              file=sys.stderr)
        return 2
    if not KUBECTL.exists():
        print(f"{KUBECTL} is missing: run `make tools` first", file=sys.stderr)
        return 2
    runs, bench_flags = argv[0], argv[1:]
    with ControlPlane() as plane:
        kube = Kube(plane, plane.workdir)
        kube.install_crds(CRDS)
        with kubectl_proxy(kube) as kube_url:
            return subprocess.call(
                [sys.executable, "-P", "-m", "agentsaga.cli", "bench",
                 "--operator-scale", runs, "--kube-url", kube_url, *bench_flags],
                cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
