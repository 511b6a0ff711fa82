"""Copy the CRDs from `crds/` (the source of truth) into the Helm chart's `crds/` folder.

    python tools/sync_crds.py           # copy
    python tools/sync_crds.py --check   # exit 1 and name the files that differ (CI, tests)

Only the files of `crds/` are managed here; the chart's own extra CRDs (kopf's peering resources)
live only in the chart and are left alone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "crds"
TARGET = ROOT / "charts" / "agentsaga" / "crds"


def drifted(source: Path = SOURCE, target: Path = TARGET) -> list[str]:
    """Names of the CRD files whose chart copy is missing or differs from the source."""
    return [
        crd.name
        for crd in sorted(source.glob("*.yaml"))
        if not (target / crd.name).is_file() or (target / crd.name).read_bytes() != crd.read_bytes()
    ]


def sync(source: Path = SOURCE, target: Path = TARGET) -> list[str]:
    """Copy every drifted CRD file into the chart; returns the names copied."""
    names = drifted(source, target)
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        (target / name).write_bytes((source / name).read_bytes())
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drift; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        names = drifted()
        for name in names:
            print(
                f"{TARGET.relative_to(ROOT) / name} differs from crds/{name}: "
                "run python tools/sync_crds.py",
                file=sys.stderr,
            )
        return 1 if names else 0
    for name in sync():
        print(f"copied crds/{name} -> {TARGET.relative_to(ROOT) / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
