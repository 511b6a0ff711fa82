"""Every install the documents give (the chart's README and examples, docs/kubernetes.md,
docs/deploy.md) renders with the real helm, and the sidecar it injects starts and serves: the
chart's migration hook Job runs as rendered (its args, env and passwords) into an empty
database of the test's Postgres, then `agentsaga sidecar` runs with exactly the args, env,
Secrets and ConfigMaps the install gives the injected container, and its own readiness probe
says SERVING. The development install (one shared DSN, the schema owner's) starts too; on the
shared sidecar role it would not, which is why the chart refuses it without the flag."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsaga.store.connections import with_user
from sagatest.chart_installs import (
    InjectedSidecar,
    Install,
    documented_installs,
    location_of,
    migration_job,
    rendered,
)
from sagatest.chart_tools import ROOT
from sagatest.sidecar_fixtures import LISTENING

INSTALLS = documented_installs()
DERIVED_IMAGE = ROOT / "examples" / "refund"
"""The tools a derived sidecar image adds (docs/deploy.md §2: refund_tools)."""
OWN_MODULES = {"acme.billing.tools"}


def test_every_document_with_an_install_is_found() -> None:
    where = {install.where.split(":")[0] for install in INSTALLS}
    assert where >= {"charts/agentsaga/README.md", "docs/kubernetes.md", "docs/deploy.md",
                     "charts/agentsaga/examples/values-existing-postgres.yaml"}, where


def _environment(extra: dict[str, str]) -> dict[str, str]:
    """The machine's environment without any AGENTSAGA_*/PG* of its own (the container has only
    what the install gives it), with the derived image's tools importable."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("AGENTSAGA_", "PG", "OTEL_"))}
    paths = [str(DERIVED_IMAGE), base.get("PYTHONPATH", "")]
    return {**base, "PYTHONPATH": os.pathsep.join(filter(None, paths)), **extra}


def _migrate(docs: list[dict[str, Any]], dsn: str, tmp: Path) -> None:
    """The chart's migration hook Job, as rendered, with its Secrets."""
    args, env, passwords = migration_job(docs)
    if "AGENTSAGA_DB_PASSWORDS_DIR" in env:
        directory = tmp / "db-passwords"
        directory.mkdir()
        for role, password in passwords.items():
            (directory / role).write_text(password)
        env["AGENTSAGA_DB_PASSWORDS_DIR"] = str(directory)
    done = subprocess.run([sys.executable, "-m", "agentsaga.cli", *args], cwd=ROOT,
                          env=_environment({**env, "AGENTSAGA_MIGRATE_DSN": dsn}),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _start(sidecar: InjectedSidecar, tmp: Path, dsn: str, shared_dsn: str
           ) -> Iterator[tuple[subprocess.Popen[str], str]]:
    def users_secret(name: str, key: str) -> str:
        # a Secret the reader creates: a DSN the sidecar's role (the documents said so of a
        # shared DSN), unless given; a connector's credential a key of the right kind
        if key in ("dsn", "connection-string"):
            return shared_dsn or with_user(dsn, "agentsaga_sidecar")
        return "sk_test_4eC39HqLyjWDarjtT1"

    args, env = sidecar.environment(tmp / "pod", location=location_of(dsn),
                                    users_secret=users_secret, listen="127.0.0.1:0")
    assert env.get("AGENTSAGA_DSN"), "the install gives the sidecar no database"
    proc = subprocess.Popen([sys.executable, "-m", "agentsaga.cli", *args], cwd=tmp,
                            env=_environment(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if match := LISTENING.search(line):
                yield proc, match.group(1)
                return
        proc.wait(timeout=30)
        yield proc, "".join(seen)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()


def _serves(sidecar: InjectedSidecar, tmp: Path, dsn: str, shared_dsn: str = "") -> str:
    """The sidecar's readiness probe's verdict ('' when it serves), or what it printed."""
    for proc, address in _start(sidecar, tmp, dsn, shared_dsn):
        if proc.poll() is not None:
            return f"the sidecar exited ({proc.returncode}):\n{address}"
        probe = sidecar.probe(address)
        done = subprocess.run([sys.executable, *probe[1:]], capture_output=True, text=True,
                              timeout=60, env=_environment({}))
        return "" if done.returncode == 0 else f"probe failed: {done.stdout}{done.stderr}"
    return "never started"


@pytest.mark.parametrize("install", INSTALLS, ids=[i.where for i in INSTALLS])
def test_each_documented_install_renders_and_its_injected_sidecar_serves(
        install: Install, pg_empty: str, tmp_path: Path) -> None:
    docs = rendered(install)
    sidecar = InjectedSidecar(docs, "")
    namespaces = sidecar.agent_namespaces()
    assert namespaces
    _migrate(docs, pg_empty, tmp_path)
    tools = next(e["value"] for e in sidecar.template()["container"]["env"]
                 if e["name"] == "AGENTSAGA_TOOLS")
    assert not set(tools.split(",")) & OWN_MODULES
    for namespace in namespaces:
        said = _serves(InjectedSidecar(docs, namespace), tmp_path / namespace, pg_empty)
        assert said == "", f"{install.where} in {namespace}: {said}"


README_INSTALL = next(i for i in INSTALLS if i.where.startswith("charts/agentsaga/README.md"))
DEVELOPMENT = ("--set", "postgres.credentials.location=",
               "--set", "postgres.allowSharedCredentialForDevelopment=true")


def test_the_shared_dsn_development_install_serves_with_the_schema_owners_dsn(
        pg_empty: str, tmp_path: Path) -> None:
    docs = rendered(README_INSTALL, *DEVELOPMENT)
    _migrate(docs, pg_empty, tmp_path)
    (namespace,) = InjectedSidecar(docs, "").agent_namespaces()
    sidecar = InjectedSidecar(docs, namespace)
    assert _serves(sidecar, tmp_path / "owner", pg_empty, shared_dsn=pg_empty) == ""
    # the shared sidecar role, which the install would otherwise share, is refused at start:
    # why the chart does not render it without the flag
    refused = _serves(sidecar, tmp_path / "shared", pg_empty,
                      shared_dsn=with_user(pg_empty, "agentsaga_sidecar"))
    assert refused.startswith("the sidecar exited"), refused
    assert "postgres.credentials.location" in refused
