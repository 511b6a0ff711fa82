"""Peers measured side by side: DBOS Transact, Temporal, Restate. Their
packages are benchmark-only and pinned (peers/requirements.txt, peers/npm-packages.txt): the bench
installs them on first use into its own virtual environment (and npm folder), never into the
product's environment; a changed pin reinstalls them."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

from agentsaga_lab.bench.stats import Sample

logger = logging.getLogger(__name__)

SCRIPTS = Path(__file__).resolve().parent / "peers"
REQUIREMENTS = SCRIPTS / "requirements.txt"
"""The peers' pip packages, pinned (`pip install -r`)."""
NPM_REQUIREMENTS = SCRIPTS / "npm-packages.txt"


def _pins(path: Path) -> tuple[str, ...]:
    return tuple(line.strip() for line in path.read_text().splitlines()
                 if line.strip() and not line.lstrip().startswith("#"))


PIP_PACKAGES = _pins(REQUIREMENTS)
NPM_PACKAGES = _pins(NPM_REQUIREMENTS)


@dataclass(frozen=True)
class PeerRun:
    sample: Sample
    phases_ms: dict[str, float]
    """Median ms between the peer's own records of a step (empty: the peer gives none)."""


@dataclass(frozen=True)
class PeerEnv:
    root: Path
    """e.g. bench/.venv-peers; npm packages go to its `npm/` folder."""

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def restate_server(self) -> Path:
        return (self.root / "npm" / "node_modules" / "@restatedev" / "restate-server-linux-x64"
                / "bin" / "restate-server")

    def ensure(self) -> None:
        """Create the environment and install the peers' packages unless already there."""
        marker = self.root / ".installed"
        wanted = " ".join(PIP_PACKAGES + NPM_PACKAGES)
        if marker.exists() and marker.read_text() == wanted:
            return
        logger.info("installing the peers (%s) into %s", wanted, self.root)
        if not self.python.exists():
            venv.EnvBuilder(with_pip=True).create(self.root)
        # run from the environment's folder: a checkout's operator/ would shadow the stdlib's
        subprocess.run([str(self.python), "-m", "pip", "install", "-q", "--require-hashes",
                        "-r", str(REQUIREMENTS)],
                       check=True, stdout=sys.stderr, cwd=self.root, env=self._env())
        npm_dir = self.root / "npm"
        npm_dir.mkdir(exist_ok=True)
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix",
                        str(npm_dir), *NPM_PACKAGES], check=True, stdout=sys.stderr)
        marker.write_text(wanted)

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ.get('PATH', '')}",
               "RESTATE_SERVER_BIN": str(self.restate_server)}
        for name in ("PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(name, None)
        return env

    def run(self, script: str, *args: str, timeout: float = 300.0) -> PeerRun:
        """Run a peer script; it prints {"latencies_ms": [...]} as its last line, and may add
        "phases_ms" (where a step's time goes, by the peer's own records)."""
        done = subprocess.run([str(self.python), str(SCRIPTS / script), *args], env=self._env(),
                              capture_output=True, text=True, timeout=timeout, cwd=self.root)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        if done.returncode != 0 or not lines:
            tail = (done.stderr or done.stdout)[-1500:]
            raise RuntimeError(f"{script} failed ({done.returncode}):\n{tail}")
        found = json.loads(lines[-1])
        return PeerRun(Sample.of([float(x) for x in found["latencies_ms"]]),
                       {str(k): float(v) for k, v in found.get("phases_ms", {}).items()})
