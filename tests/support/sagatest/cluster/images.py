"""The product's images, built from uv.lock by tools/images.py into a cache outside the work tree
(the first build takes minutes; later ones return at once, and a change of the source rebuilds
only each image's thin product layer).

    built_images()   {"sidecar", "operator", "agent", "base"} -> the OCI archive of each,
                     importable with `ctr -n k8s.io images import`
    references()     the same names -> each image's reference in the archive, e.g.
                     `localhost/agentsaga-sidecar:<key>` (what a pod's `image:` names)
    image_records()  the same names -> `BuiltImage` (reference, archive, sizes, build time)

Built once per test process (the result is kept); builders in parallel processes wait for one
another (tools/images.py holds a file lock).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]  # tests/support/sagatest/cluster/ -> the repository
BUILDER = ROOT / "tools" / "images.py"
NAMES = ("sidecar", "operator", "agent", "base")


@dataclass(frozen=True)
class BuiltImage:
    reference: str
    archive: Path
    size_bytes: int
    """Uncompressed: what a container's root filesystem holds."""
    compressed_bytes: int
    build_seconds: float


@functools.cache
def image_records() -> dict[str, BuiltImage]:
    """Every image, built now if missing (its progress goes to stderr)."""
    result = subprocess.run([sys.executable, "-P", str(BUILDER), "build"], stdout=subprocess.PIPE,
                            text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{BUILDER} build failed (exit {result.returncode}); see stderr")
    records = json.loads(result.stdout)
    return {name: BuiltImage(reference=r["reference"], archive=Path(r["archive"]),
                             size_bytes=r["size_bytes"], compressed_bytes=r["compressed_bytes"],
                             build_seconds=r["build_seconds"])
            for name, r in records.items()}


def built_images() -> dict[str, Path]:
    """Each image's OCI archive."""
    return {name: record.archive for name, record in image_records().items()}


def references() -> dict[str, str]:
    """Each image's reference, as its archive names it."""
    return {name: record.reference for name, record in image_records().items()}
