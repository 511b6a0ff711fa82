"""docs/mcp.md's quick start runs as written: its command blocks typed into one shell at the
repository root, in order (the world with its MCP server, `agentsaga mcp check` of
examples/mcp/upstreams.yaml, the sidecar in front of it, examples/mcp/call.py, `agentsaga log`,
the world's truth, `kill %1 %2`). The saga log is the test's database (AGENTSAGA_DSN) and the
sidecar's gRPC port a free one (AGENTSAGA_LISTEN), so that it meets no other test's; the outcome
is read from the world's ground truth and the saga log."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest

from sagatest.doc_blocks import Shell, blocks, commands
from sagatest.sidecar_fixtures import ROOT

PAGE = ROOT / "docs" / "mcp.md"
WORLD_URL = "http://127.0.0.1:8480"  # where the page's `agentsaga world --port 8480` serves


def _serves(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


def _ready(command: str) -> tuple[str, re.Pattern[str]]:
    if command.startswith("agentsaga world"):
        return "the world's MCP server", re.compile(r"MCP\s+http://127\.0\.0\.1:8481/mcp")
    if command.startswith("agentsaga sidecar"):
        return "the sidecar listening", re.compile(r"agentsaga sidecar listening on")
    raise AssertionError(f"the page starts {command!r} in the background: say here what shows "
                         "it is ready")


@pytest.mark.timeout(300)
def test_the_mcp_quick_start_runs_as_written(pg: str, tmp_path: Path) -> None:
    assert (ROOT / ".venv" / "bin" / "activate").exists(), "make test creates .venv"
    assert not _serves(f"{WORLD_URL}/_world/truth"), f"something already serves {WORLD_URL}"
    text = PAGE.read_text()
    start = text.index("**Quick start**")
    found = [body for kind, body in blocks(text[start:]) if kind == "sh"]
    last = next(n for n, body in enumerate(found) if "kill %1 %2" in body)
    found = found[:last + 1]  # the quick start's blocks: up to the one that stops its jobs
    assert len(found) == 4
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "AGENTSAGA_TOOLS", "AGENTSAGA_MCP_UPSTREAMS")}
    shell = Shell(ROOT, {**env, "AGENTSAGA_DSN": pg, "AGENTSAGA_LISTEN": "127.0.0.1:0"},
                  tmp_path / "shell.log")
    truth = None
    try:
        for block in found:
            if "kill %1 %2" in block:
                truth = httpx.get(f"{WORLD_URL}/_world/truth", timeout=5).json()
            shell.run(block)
            for command in commands(block):
                if command.split("#")[0].rstrip().endswith("&"):
                    what, seen = _ready(command)
                    shell.wait_for(seen.search, what)
        output = shell.output()
        assert shell.close() == 0, output
    finally:
        shell.close()
    # mcp check: every declared tool offered, the undeclared one hidden with the reason
    assert re.search(r"world\s+bulk_email_customers\s+no\s+-\s+hidden", output), output
    assert re.search(r"world\s+create_ticket\s+yes\s+compensatable\s+declared", output)
    offered = re.search(r"offered: (.*)", output)
    assert offered, output
    names = offered.group(1).split(", ")
    assert "create_ticket" in names and "agentsaga_reach_pivot" in names
    assert "bulk_email_customers" not in names
    ticket = re.search(r'create_ticket: \{"id": "(SUP-\d+)"', output)
    assert ticket, output
    assert re.search(rf"0\s+create_ticket\s+compensatable\s+CONFIRMED\s+\S+\s+{ticket.group(1)}",
                     output), output
    assert truth is not None
    tickets = [t for t in truth["tickets"] if t["system"] == "jira"]
    assert [t["key"] for t in tickets] == [ticket.group(1)], tickets
    assert any(label.startswith("saga-") for label in tickets[0]["labels"]), tickets
    assert not _serves(f"{WORLD_URL}/_world/truth"), "kill %1 %2 stopped the world"
