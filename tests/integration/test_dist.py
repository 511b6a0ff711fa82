"""`make dist` (tools/dist.py): the product's, the agent side's and the lab's wheels and the
chart's package, built from the current source; the agent side's wheel installed into a fresh
virtual environment with its locked dependencies (images/agent.requirements.lock, what the
agent's image installs) holds the client and nothing of the sidecar, the operator or the
database, and an agent imports the client there."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".uv" / "bin" / "uv"

pytestmark = [pytest.mark.install, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist") / "dist"
    subprocess.run([sys.executable, "-P", str(ROOT / "tools" / "dist.py"), str(out)],
                   check=True, capture_output=True, text=True, timeout=600, cwd=ROOT)
    return out


def test_dist_holds_the_three_wheels_and_the_chart(dist: Path) -> None:
    assert sorted(p.name for p in dist.iterdir() if p.suffix in (".whl", ".tgz")) == [
        "agentsaga-0.1.0-py3-none-any.whl", "agentsaga-0.1.0.tgz",
        "agentsaga_client-0.1.0-py3-none-any.whl", "agentsaga_lab-0.1.0-py3-none-any.whl"]
    with zipfile.ZipFile(dist / "agentsaga-0.1.0-py3-none-any.whl") as product:
        names = product.namelist()
        assert "agentsaga/store/steps.py" in names and "agentsaga/sidecar/__init__.py" in names
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names[-8:]
    with zipfile.ZipFile(dist / "agentsaga_client-0.1.0-py3-none-any.whl") as client:
        names = client.namelist()
        assert "agentsaga/client/__init__.py" in names
        assert "agentsaga/adapters/langgraph.py" in names
        assert not [n for n in names if n.startswith(("agentsaga/store/", "agentsaga/sidecar/",
                                                      "agentsaga/operator/", "agentsaga/cli/"))]
    with tarfile.open(dist / "agentsaga-0.1.0.tgz") as chart:
        assert "agentsaga/Chart.yaml" in chart.getnames()


def test_the_agent_side_installs_alone_and_an_agent_imports_the_client(
        dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "agent-venv"
    subprocess.run([str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)],
                   check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([str(UV), "pip", "install", "--quiet", "--python", python, "--require-hashes",
                    "-r", str(ROOT / "images" / "agent.requirements.lock")],
                   check=True, timeout=600)
    subprocess.run([str(UV), "pip", "install", "--quiet", "--python", python, "--no-deps",
                    str(dist / "agentsaga_client-0.1.0-py3-none-any.whl")], check=True,
                   timeout=120)
    code = ("import importlib.util, json, sys\n"
            "from agentsaga import tool, Compensation\n"
            "from agentsaga.client import SagaClient, AsyncSagaClient, SYSTEM_PROMPT\n"
            "client = SagaClient('127.0.0.1:1')\n"
            "client.close()\n"
            "print(json.dumps({'loaded': sorted({m.split('.')[0] for m in sys.modules}),\n"
            "                  'absent': [m for m in sys.argv[1:]\n"
            "                             if importlib.util.find_spec(m) is None]}))")
    absent = ["kubernetes", "kopf", "psycopg", "mcp", "agentsaga.store", "agentsaga.sidecar",
              "agentsaga.cli"]
    done = subprocess.run([python, "-P", "-c", code, *absent], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["absent"] == absent
    assert {"grpc", "google", "pydantic", "opentelemetry"} <= set(seen["loaded"])
    # an adapter without its framework says which extra brings it (of this distribution)
    adapter = subprocess.run([python, "-P", "-c", "import agentsaga.adapters.langgraph"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert adapter.returncode != 0
    assert "agentsaga-client[langgraph]" in adapter.stderr, adapter.stderr
