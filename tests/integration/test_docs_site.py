"""The documentation site (mkdocs.yml, docs/) builds with warnings as errors, so a broken link,
anchor or nav entry fails here; its benchmark figures are the page `agentsaga bench` wrote from
the results kept beside it; and no page, the README included, cites an issue number."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from agentsaga_lab.bench import figures_page
from agentsaga_lab.bench.cli import latency_rows, ratio_rows, summary_lines

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FIGURES = DOCS / "benchmarks" / "figures.md"


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "benchmarks" / "figures" / "index.html").exists()
    assert (tmp_path / "site" / "configuration" / "index.html").exists()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "concepts.md"
    page.write_text(page.read_text() + "\nSee [the pivot](tools.md#no-such-section).\n")
    done = build(tmp_path, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-section" in done.stderr


def test_the_figures_page_is_the_bench_s_own() -> None:
    results = json.loads(FIGURES.with_suffix(".json").read_text())
    written = figures_page.page(results, latency_rows(results), summary_lines(results),
                                ratio_rows(results))
    assert FIGURES.read_text() == written, (
        "docs/benchmarks/figures.md is written by `agentsaga bench --write-docs`, not by hand; "
        "to write it again from the same run: `agentsaga bench --from-json "
        "docs/benchmarks/figures.json --write-docs docs/benchmarks/figures.md`")
    assert results["run"]["command"].startswith("agentsaga bench ")


ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w&/\[(])#\d+\b", re.IGNORECASE)


def test_no_page_cites_an_issue_number() -> None:
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    found = [f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
             for page in pages for n, line in enumerate(page.read_text().splitlines(), 1)
             if ISSUE.search(line)]
    assert found == []


CITED_ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
"""In code, `#1182` is the essay's order number; an issue is cited in words."""


def test_no_source_file_cites_an_issue_number() -> None:
    """The code speaks of what it does, not of the ticket that asked for it: the product, the
    lab, the tools and the tests."""
    folders = ("agentsaga", "sidecar", "operator", "lab", "tools", "tests", "charts", "examples")
    files = [path for folder in folders for path in sorted((ROOT / folder).rglob("*"))
             if path.suffix in (".py", ".yaml", ".sh", ".toml", ".tpl", ".md")
             and "v1" not in path.parts and "__pycache__" not in path.parts]
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in files for n, line in enumerate(path.read_text().splitlines(), 1)
             if CITED_ISSUE.search(line)]
    assert found == []
