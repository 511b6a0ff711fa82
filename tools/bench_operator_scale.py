"""`agentsaga bench --operator-scale N` against the Kubernetes API stand-in, in one command.

    make bench-operator-scale N=10000 [BENCH_ARGS="--quick --no-peers --log-rows 0"]
    .venv/bin/python -P tools/bench_operator_scale.py 10000 [agentsaga bench flags...]

Starts the API stand-in of this repository's tests (tests/support/sagatest/kubeapi) serving the
CRDs of crds/, puts the real `kubectl proxy` (tools/bin) in front of it, as the operator of a
real cluster would give the bench, runs `agentsaga bench --operator-scale N --kube-url ...`
with the other flags given, and stops the proxy and the stand-in whatever the bench did. The
bench's exit code is this command's. The product never imports the stand-in: this tool is the
only place where the bench and the stand-in meet, outside the tests.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from sagatest.kube_fixtures import CRDS, KUBECTL, Kube, kubectl_proxy  # noqa: E402  (the path above)

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
    with tempfile.TemporaryDirectory(prefix="agentsaga-operator-scale-") as work:
        kube = Kube(Path(work)).start()
        try:
            kube.install_crds(CRDS)
            with kubectl_proxy(kube) as kube_url:
                return subprocess.call(
                    [sys.executable, "-P", "-m", "agentsaga.cli", "bench",
                     "--operator-scale", runs, "--kube-url", kube_url, *bench_flags],
                    cwd=ROOT)
        finally:
            kube.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
