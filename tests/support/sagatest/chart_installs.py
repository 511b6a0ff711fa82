"""Every install the documents tell their reader to type, and the sidecar such an install
injects, started as a process with exactly what the install gives its container.

`documented_installs()` finds each `helm install` of docs/ and of the chart's README and
examples, as written. `InjectedSidecar` renders one with the real helm and reads the container
the webhook injects (the sidecar-template ConfigMap): its args, env (values, the Secrets' keys,
the downward API), envFrom ConfigMaps and mounted Secrets. Where a cluster would supply
something, the test supplies the same kind of thing: the Secrets the reader creates (a DSN
names the test's Postgres), the chart's own Secrets as rendered, the pod's name and namespace,
and Postgres at `postgres.credentials.location` (the test server, as DNS would resolve it).
Mount paths move under a temporary root, the listen ports to free ones; nothing else changes.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagatest.chart_tools import CHART, ROOT, helm, with_setup_job

DOCUMENTS = (ROOT / "charts" / "agentsaga" / "README.md", ROOT / "docs" / "kubernetes.md",
             ROOT / "docs" / "deploy.md", ROOT / "docs" / "getting-started.md",
             *sorted((CHART / "examples").glob("*")))
HELM_INSTALL = re.compile(r"(?:^|\n)[#\s]*(helm install (?:[^\n]*\\\n[#\s]*)*[^\n]*)")


@dataclass(frozen=True)
class Install:
    """One `helm install` as a document writes it."""

    where: str
    release: str
    namespace: str
    args: tuple[str, ...]
    """The values it gives: -f FILE and --set pairs, as written (paths from the repository)."""


def documented_installs() -> list[Install]:
    found = []
    for path in DOCUMENTS:
        if not path.is_file():
            continue
        for match in HELM_INSTALL.finditer(path.read_text()):
            text = re.sub(r"\\\n[#\s]*", " ", match.group(1))
            words = shlex.split(text)
            namespace = words[words.index("-n") + 1] if "-n" in words else "default"
            args = []
            for i, word in enumerate(words):
                if word in ("--set", "-f") and i + 1 < len(words):
                    args += [word, words[i + 1]]
            found.append(Install(f"{path.relative_to(ROOT)}: {text[:60]}...", words[2],
                                 namespace, tuple(args)))
    return found


def rendered(install: Install, *extra: str) -> list[dict[str, Any]]:
    """The install's objects once its setup Job has run (the Secrets it makes included)."""
    out = helm("template", install.release, str(CHART), "--namespace", install.namespace,
               *install.args, *extra).stdout
    return with_setup_job([doc for doc in yaml.safe_load_all(out) if doc])


def _data(secret: dict[str, Any]) -> dict[str, str]:
    data = {k: str(v) for k, v in (secret.get("stringData") or {}).items()}
    data |= {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    return data


@dataclass
class InjectedSidecar:
    """The container the webhook injects in `namespace` for this install, as a local process."""

    docs: list[dict[str, Any]]
    namespace: str

    def template(self) -> dict[str, Any]:
        (config,) = [d for d in self.docs if d["kind"] == "ConfigMap"
                     and "sidecar.json" in (d.get("data") or {})]
        template: dict[str, Any] = json.loads(config["data"]["sidecar.json"])
        return template

    def agent_namespaces(self) -> list[str]:
        return sorted({d["metadata"]["namespace"] for d in self.docs
                       if d["kind"] == "ServiceAccount"
                       and d["metadata"]["labels"].get("app.kubernetes.io/component") == "sidecar"})

    def chart_secret(self, name: str) -> dict[str, str] | None:
        for doc in self.docs:
            if doc["kind"] == "Secret" and doc["metadata"]["name"] == name and doc[
                    "metadata"].get("namespace") in (self.namespace, None):
                return _data(doc)
        return None

    def config_map(self, name: str) -> dict[str, str]:
        for doc in self.docs:
            if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == name and doc[
                    "metadata"].get("namespace") == self.namespace:
                return {k: str(v) for k, v in (doc.get("data") or {}).items()}
        raise AssertionError(f"the install renders no ConfigMap {name} in {self.namespace}")

    def environment(self, root: Path, *, location: str, users_secret: Callable[[str, str], str],
                    listen: str) -> tuple[list[str], dict[str, str]]:
        """(args, env) of the container: `users_secret(name, key)` is what the reader put into
        a Secret the chart does not make; mounts under `root`."""
        template = self.template()
        container = template["container"]
        secret_of = {v["name"]: v["secret"] for v in template["volumes"] if "secret" in v}

        def secret_value(name: str, key: str) -> str:
            made = self.chart_secret(name)
            return made[key] if made is not None else users_secret(name, key)

        mounts = {}
        for mount in container.get("volumeMounts", []):
            target = root / mount["mountPath"].lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = str(target)
            secret = secret_of.get(mount["name"])
            if secret is not None:
                for item in secret.get("items", []):
                    (target / item["path"]).write_text(
                        secret_value(secret["secretName"], item["key"]))

        def moved(value: str) -> str:
            for path, target in mounts.items():
                if value == path or value.startswith(path + "/"):
                    return target + value[len(path):]
            return value

        env: dict[str, str] = {}
        for source in container.get("envFrom", []):
            env |= self.config_map(source["configMapRef"]["name"])
        pod = {"metadata.name": "refund-agent-7d9f-abcde", "metadata.namespace": self.namespace,
               "metadata.uid": "0d6f6a8e-1111-4222-8333-444455556666"}
        for entry in container["env"]:
            if "value" in entry:
                env[entry["name"]] = moved(str(entry["value"]))
                continue
            source = entry["valueFrom"]
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[entry["name"]] = secret_value(ref["name"], ref["key"])
            elif "fieldRef" in source:
                env[entry["name"]] = pod.get(source["fieldRef"]["fieldPath"], "")
        if env.get("AGENTSAGA_DSN", "").startswith("postgres") and "@" not in env[
                "AGENTSAGA_DSN"]:
            env["AGENTSAGA_DSN"] = location  # postgres.credentials.location, resolved
        env["AGENTSAGA_LISTEN"] = listen
        if env.get("AGENTSAGA_MCP_LISTEN"):
            env["AGENTSAGA_MCP_LISTEN"] = "127.0.0.1:0"
        return list(container["args"]), env

    def probe(self, address: str) -> list[str]:
        """The container's readiness probe command, pointed at `address`."""
        command = list(self.template()["container"]["readinessProbe"]["exec"]["command"])
        return [*command[:-2], address, command[-1]]


def migration_job(docs: list[dict[str, Any]]) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(args, env, the passwords file of each role) of the chart's migration hook Job."""
    (job,) = [d for d in docs if d["kind"] == "Job"
              and d["metadata"]["labels"].get("app.kubernetes.io/component") == "migration"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}
    passwords: dict[str, str] = {}
    for volume in job["spec"]["template"]["spec"].get("volumes", []):
        if "secret" not in volume:
            continue  # the writable /tmp (an emptyDir): the migration runs in the test's own
        for doc in docs:
            if doc["kind"] == "Secret" and doc["metadata"]["name"] == volume["secret"][
                    "secretName"]:
                passwords = _data(doc)
    return list(container["args"]), env, passwords


def location_of(dsn: str) -> str:
    """`dsn` without its user and password: what postgres.credentials.location names."""
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if k not in ("user", "password")}
    return make_conninfo(**params)  # type: ignore[arg-type]
