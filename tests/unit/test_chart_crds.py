"""The chart carries a checked copy of crds/ (the source of truth): tools/sync_crds.py copies it,
and this test fails when the two drift."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _sync_crds() -> ModuleType:  # tools/ is not a package
    spec = importlib.util.spec_from_file_location("sync_crds", ROOT / "tools" / "sync_crds.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["sync_crds"] = module
    spec.loader.exec_module(module)
    return module


def test_chart_crds_are_identical_to_the_source_crds() -> None:
    sync = _sync_crds()
    sources = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert "agentruns.agentsaga.io.yaml" in sources
    assert sync.drifted() == [], "chart CRDs drifted from crds/: run python tools/sync_crds.py"


def test_sync_crds_reports_and_repairs_drift(tmp_path: Path) -> None:
    sync = _sync_crds()
    source, target = tmp_path / "crds", tmp_path / "chart-crds"
    source.mkdir()
    target.mkdir()
    (source / "a.yaml").write_text("kind: CustomResourceDefinition\n")
    (source / "b.yaml").write_text("kind: CustomResourceDefinition  # b\n")
    (target / "a.yaml").write_text("kind: CustomResourceDefinition\n")
    (target / "b.yaml").write_text("stale\n")
    (target / "extra.yaml").write_text("chart-owned\n")
    assert sync.drifted(source, target) == ["b.yaml"]
    assert sync.sync(source, target) == ["b.yaml"]
    assert sync.drifted(source, target) == []
    assert (target / "b.yaml").read_text() == (source / "b.yaml").read_text()
    assert (target / "extra.yaml").read_text() == "chart-owned\n"
