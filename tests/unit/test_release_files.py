"""The files a user reads before adopting: LICENSE is the licence every distribution's metadata
names (SPDX `Apache-2.0`), and CHANGELOG.md is in Keep a Changelog's form, its newest section
the version pyproject.toml gives (unreleased until an index has it), with no tracker numbers."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = (ROOT, ROOT / "client", ROOT / "lab")


def test_the_license_file_is_the_licence_every_distribution_names() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    for project in PROJECTS:
        meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
        assert meta["license"] == "Apache-2.0", project
        assert not [c for c in meta.get("classifiers", []) if c.startswith("License ::")
                    and "Apache" not in c], project
    chart = (ROOT / "charts" / "agentsaga" / "Chart.yaml").read_text()
    assert "license" not in chart.lower() or "Apache-2.0" in chart


def test_the_changelog_keeps_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "https://keepachangelog.com/" in text
    sections = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert sections and sections[0] == "Unreleased"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"version, {version}," in text.split("## [Unreleased]")[1].split("###")[0]
    kinds = set(re.findall(r"^### (\w+)", text, re.M))
    assert kinds and kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    assert not re.search(r"(?<![\w&])#\d+\b|\bissue \d+", text), "no tracker numbers"
