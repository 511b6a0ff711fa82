"""The images the test node runs: the product's (tools/images.py builds them from uv.lock, into
the cache) and the refund example's sidecar (examples/refund/sidecar.Dockerfile: the product's
sidecar image with the example's tools in it, as docs/deploy.md builds it), built here with
buildah on top of the sidecar's archive, with no network and no registry, once per sidecar
image and tools file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sagatest.cluster.images import image_records
from sagatest.cluster.kube import ROOT
from sagatest.cluster.node import cache_dir

EXAMPLE = ROOT / "examples" / "refund"
REFUND_SIDECAR = "localhost/agentsaga-sidecar-refunds"


@dataclass(frozen=True)
class PodImage:
    reference: str
    """The image's full name, as containerd keeps it and a pod names it."""
    archive: Path
    size_bytes: int

    @property
    def repository(self) -> str:
        return self.reference.rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.reference.rsplit(":", 1)[1]


def product_images() -> dict[str, PodImage]:
    """sidecar, operator and agent (the refund example's agent), built if missing
    (`sagatest.cluster.images`: tools/images.py, once per test process)."""
    return {name: PodImage(record.reference, record.archive, record.size_bytes)
            for name, record in image_records().items()
            if name in ("sidecar", "operator", "agent")}


def refund_sidecar(sidecar: PodImage) -> PodImage:
    """examples/refund/sidecar.Dockerfile built FROM the sidecar's archive (cached by both)."""
    digest = hashlib.sha256()
    for part in (str(sidecar.archive), str(sidecar.archive.stat().st_mtime_ns),
                 (EXAMPLE / "sidecar.Dockerfile").read_text(),
                 (EXAMPLE / "refund_tools.py").read_text()):
        digest.update(part.encode() + b"\0")
    key = digest.hexdigest()[:16]
    reference = f"{REFUND_SIDECAR}:{key}"
    archive = cache_dir() / "images" / "sidecar-refunds" / key / "image.tar"
    if not archive.exists():
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_suffix(f".{os.getpid()}.partial")
        storage = Path(tempfile.mkdtemp(prefix="agentsaga-buildah-"))
        buildah = ["buildah", "--root", str(storage / "root"), "--runroot",
                   str(storage / "run"), "--storage-driver", "vfs"]
        try:
            built = subprocess.run(
                [*buildah, "bud", "--runtime", "runc", "--network", "none", "--pull-never",
                 "--build-arg", f"BASE=oci-archive:{sidecar.archive}",
                 "-f", str(EXAMPLE / "sidecar.Dockerfile"), "-t", reference, str(EXAMPLE)],
                capture_output=True, text=True, check=False)
            if built.returncode != 0:
                raise RuntimeError(f"buildah bud of {EXAMPLE / 'sidecar.Dockerfile'} failed:\n"
                                   f"{built.stderr[-3000:]}")
            pushed = subprocess.run([*buildah, "push", reference,
                                     f"oci-archive:{partial}:{reference}"],
                                    capture_output=True, text=True, check=False)
            if pushed.returncode != 0:
                raise RuntimeError(f"buildah push of {reference} failed:\n{pushed.stderr}")
            partial.replace(archive)
        finally:
            partial.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                subprocess.run(["rm", "-rf", str(storage)], check=False)
    return PodImage(reference, archive, archive.stat().st_size)
