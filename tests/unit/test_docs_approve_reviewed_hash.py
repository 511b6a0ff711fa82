"""Every approval a document shows approves the plan hash the person reviewed, never the one
staged at the moment the command runs (`kubectl get ... -o jsonpath='{.status.pivot.planHash}'`
fed into the patch approves whatever was staged since the review, unread)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sagatest.doc_blocks import blocks

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted({*ROOT.glob("docs/**/*.md"), ROOT / "README.md",
                    *ROOT.glob("charts/agentsaga/**/*.md"), *ROOT.glob("examples/**/*.md"),
                    ROOT / "charts" / "agentsaga" / "templates" / "NOTES.txt"})
FENCED = re.compile(r"```[A-Za-z]*\n(.*?)```", re.S)
LIVE_HASH = re.compile(r"\$\(\s*kubectl[^)]*planHash|planHash[^\n]*\|\s*(xargs|kubectl)"
                       r"|\$\(\s*kubectl[^)]*\.status\.pivot\}")
"""A plan hash read from the cluster into the command (command substitution or a pipe)."""


def approval_blocks(path: Path) -> list[str]:
    """The command blocks of `path` that write a pivot approval (NOTES.txt: all of it)."""
    text = path.read_text()
    found = [text] if path.suffix == ".txt" else FENCED.findall(text)
    return [b for b in found if "approval" in b and "planHash" in b and "patch" in b]


def test_the_documents_show_approvals() -> None:
    shown = {path.relative_to(ROOT).as_posix() for path in DOCUMENTS if approval_blocks(path)}
    assert {"docs/deploy.md", "docs/concepts.md",
            "charts/agentsaga/templates/NOTES.txt"} <= shown, shown


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_an_approval_in_the_documents_carries_the_reviewed_hash(path: Path) -> None:
    for block in approval_blocks(path):
        assert not LIVE_HASH.search(block), (
            f"{path.relative_to(ROOT)} approves the hash staged when the command runs, not the "
            f"one reviewed:\n{block}")
        assert "jsonpath='{.status.pivot.planHash}'" not in block, block


def test_the_deploy_guide_approves_the_hash_its_plan_command_printed() -> None:
    """The guide's by-hand approval names the hash that `kubectl agentsaga plan` showed (the
    one the plugin's approval names too)."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    sh = [body for kind, body in blocks(text) if kind == "sh"]
    [by_hand] = [b for b in sh if "patch agentrun" in b and "approval" in b]
    [plugin] = [b for b in sh if "kubectl agentsaga approve" in b]
    reviewed = re.search(r"--plan-hash (\w+)", plugin)
    assert reviewed is not None
    assert re.search(rf"^HASH={reviewed.group(1)}\b", by_hand, re.M), by_hand
    assert "$(" not in by_hand
