"""`PYTHONPATH=tests/support python -m sagatest.kubeapi --port 8001 [--crds crds]`: run the
stand-in for manual use."""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import threading

from .kubeconfig import write_kubeconfig
from .standin import KubeStandIn


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m sagatest.kubeapi")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--crds", help="create every CRD of this directory at start")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    kube = KubeStandIn(port=args.port).start()
    if args.crds:
        kube.install_crds(args.crds)
    path = os.path.join(tempfile.mkdtemp(prefix="kubeapi-"), "kubeconfig")
    write_kubeconfig(path, kube.url)
    print(f"serving {kube.url}\nexport KUBECONFIG={path}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        kube.stop()


if __name__ == "__main__":
    main()
