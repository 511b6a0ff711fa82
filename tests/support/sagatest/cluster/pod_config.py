"""What a kubelet makes of a pod's spec before it starts a container, done for local processes:
the volumes written as files into the pod's folder, each container's environment resolved, and
its command line mapped to something this machine can run.

Volumes (`secret`, `configMap`, `emptyDir`, `downwardAPI`, and `projected` with secret,
configMap, downwardAPI and serviceAccountToken sources) are written under the pod's folder, one
folder per volume. A container's `mountPath` is absolute (`/var/run/secrets/agentsaga/stripe`)
and no local process can see a file there, so the mount table maps each mountPath to its local
folder, and every environment value and command-line argument that names a path under a
mountPath (`AGENTSAGA_STRIPE_API_KEY_FILE=/var/run/secrets/agentsaga/stripe/key`, the chart's
way of pointing the product at its mounted credentials; `AGENTSAGA_MCP_UPSTREAMS`; an argument
`--config=/etc/x/c.yaml`) is rewritten to the local path. An emptyDir mounted at /tmp also
becomes TMPDIR. Nothing in the product is changed: it reads the paths it is given.

Which containers run (`command_line`): the product's CLI (`agentsaga ...` as command, or no
command in an image of the product's: its name starts with `agentsaga`, or its repository is
under an `agentsaga/` path, as the documented builds tag them; their entrypoint is `agentsaga`)
runs as
`sys.executable -P -m agentsaga.cli ...` from this checkout; in a `python*` image, `python ...`
runs with `sys.executable`; in a `busybox` image the command runs from the host's PATH. Any
other image's filesystem is not here, so its containers are simulated (kwok-style): reported
running until the pod is deleted.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
# the processes get no more of the test process's environment than an image would give them:
# a PATH, a locale, and the test support on PYTHONPATH (tests/conftest.py puts it there)
PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "PYTHONSAFEPATH",
                  "COVERAGE_PROCESS_START")
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_INDEXED = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


class PodConfigError(RuntimeError):
    """The pod cannot start yet: a Secret or ConfigMap (or key) it needs is missing or not
    readable by the node (a kubelet reports CreateContainerConfigError and tries again), or the
    spec uses something this agent does not support (said in the message)."""


@dataclass
class MountTable:
    """mountPath -> local folder or file, for one container."""

    paths: dict[str, Path] = field(default_factory=dict)

    def local(self, value: str) -> str:
        """`value` with a leading mountPath replaced by its local path (the longest match)."""
        for mount in sorted(self.paths, key=len, reverse=True):
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                return str(self.paths[mount]) + value[len(mount.rstrip("/")):]
        return value

    def argument(self, value: str) -> str:
        """A command-line argument: `/path` or `--flag=/path`."""
        name, equals, rest = value.partition("=")
        if equals and rest.startswith("/"):
            return f"{name}={self.local(rest)}"
        return self.local(value)


def image_name(image: str) -> str:
    """`ghcr.io/org/agentsaga-sidecar:1.0@sha256:...` -> `agentsaga-sidecar`."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def command_line(container: Obj, expand: Callable[[str], str] = str) -> list[str] | None:
    """The local command for a container, or None when it is simulated (see the module's
    docstring for the rule). `expand` resolves $(VAR) references, as a kubelet does."""
    full = str(container.get("image") or "")
    image = image_name(full)
    command = [expand(part) for part in container.get("command") or []]
    args = [expand(part) for part in container.get("args") or []]
    # agentsaga-sidecar:1, ghcr.io/agentsaga/operator:1, registry.example.com/agentsaga/sidecar-x
    product_image = image.startswith("agentsaga") or "agentsaga" in full.split("/")[:-1]
    if not command and product_image:
        command = ["agentsaga"]  # the images' ENTRYPOINT (images/*.Dockerfile)
        args = args or ["sidecar"]  # and their CMD
    argv = command + args
    if not argv:
        return None
    program = argv[0]
    if program == "agentsaga":
        return [sys.executable, "-P", "-m", "agentsaga.cli", *argv[1:]]
    if image.startswith("python") and re.fullmatch(r"python(3(\.\d+)?)?", program):
        return [sys.executable, *argv[1:]]
    if image == "busybox":
        found = shutil.which(program)
        if found is None:
            raise PodConfigError(f"{program!r} (image busybox) is not on this machine's PATH")
        return [found, *argv[1:]]
    return None


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a defined variable is replaced, an undefined reference
    is kept as written, `$$` is a literal `$`."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))
    return _REFERENCE.sub(replace, value)


def field_value(pod: Obj, path: str) -> str:
    """A downward-API field of the pod (env `fieldRef` or a downwardAPI volume item)."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    indexed = _INDEXED.fullmatch(path)
    if indexed:
        return str((meta.get(indexed.group(1)) or {}).get(indexed.group(2), ""))
    simple: dict[str, Callable[[], Any]] = {
        "metadata.name": lambda: meta["name"],
        "metadata.namespace": lambda: meta["namespace"],
        "metadata.uid": lambda: meta["uid"],
        "metadata.labels": lambda: _lines(meta.get("labels") or {}),
        "metadata.annotations": lambda: _lines(meta.get("annotations") or {}),
        "spec.nodeName": lambda: spec.get("nodeName", ""),
        "spec.serviceAccountName": lambda: spec.get("serviceAccountName", ""),
        "status.podIP": lambda: status.get("podIP", "127.0.0.1"),
        "status.podIPs": lambda: status.get("podIP", "127.0.0.1"),
        "status.hostIP": lambda: status.get("hostIP", "127.0.0.1"),
        "status.hostIPs": lambda: status.get("hostIP", "127.0.0.1"),
    }
    if path not in simple:
        raise PodConfigError(f"fieldRef {path!r} is not supported by the test node agent")
    return str(simple[path]())


def _lines(values: Mapping[str, str]) -> str:
    return "\n".join(f'{key}="{value}"' for key, value in sorted(values.items()))


class Sources:
    """The Secrets and ConfigMaps of one pod's namespace, read once each through `get`
    (the node's own credentials: the Node authorizer lets it read only what its pods name)."""

    def __init__(self, namespace: str, get: Callable[[str], Obj | None]) -> None:
        self._namespace = namespace
        self._get = get
        self._cache: dict[tuple[str, str], Obj | None] = {}

    def data(self, kind: str, name: str, *, optional: bool = False) -> dict[str, bytes]:
        """The decoded data of Secret or ConfigMap `name`; {} when missing and optional."""
        key = (kind, name)
        if key not in self._cache:
            plural = "secrets" if kind == "Secret" else "configmaps"
            self._cache[key] = self._get(f"/api/v1/namespaces/{self._namespace}/{plural}/{name}")
        found = self._cache[key]
        if found is None:
            if optional:
                return {}
            raise PodConfigError(f'{kind.lower()} "{name}" not found')
        if kind == "Secret":
            return {k: base64.b64decode(v) for k, v in (found.get("data") or {}).items()}
        values = {k: v.encode() for k, v in (found.get("data") or {}).items()}
        values.update({k: base64.b64decode(v)
                       for k, v in (found.get("binaryData") or {}).items()})
        return values

    def value(self, kind: str, ref: Obj) -> str | None:
        """One key (secretKeyRef / configMapKeyRef); None when optional and missing."""
        optional = bool(ref.get("optional"))
        values = self.data(kind, ref["name"], optional=optional)
        if ref["key"] not in values:
            if optional:
                return None
            raise PodConfigError(f"couldn't find key {ref['key']} in {kind} "
                                 f"{self._namespace}/{ref['name']}")
        return values[ref["key"]].decode()


def environment(pod: Obj, container: Obj, sources: Sources, mounts: MountTable,
                base: Mapping[str, str]) -> dict[str, str]:
    """The container's environment as a kubelet builds it: `base` (the service variables),
    then envFrom in order, then env in order with $(VAR) expansion; paths under a mountPath
    rewritten to the pod's folder."""
    env: dict[str, str] = dict(base)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if key in source:
                ref = source[key]
                for name, value in sources.data(kind, ref["name"],
                                                optional=bool(ref.get("optional"))).items():
                    env[prefix + name] = value.decode()
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(item.get("value", ""), env)
            continue
        source = item["valueFrom"]
        resolved: str | None
        if "secretKeyRef" in source:
            resolved = sources.value("Secret", source["secretKeyRef"])
        elif "configMapKeyRef" in source:
            resolved = sources.value("ConfigMap", source["configMapKeyRef"])
        elif "fieldRef" in source:
            resolved = field_value(pod, source["fieldRef"]["fieldPath"])
        else:
            raise PodConfigError(f"env {name}: only secretKeyRef, configMapKeyRef and fieldRef "
                                 f"are supported by the test node agent, not {sorted(source)}")
        if resolved is not None:
            env[name] = resolved
    tmp = mounts.paths.get("/tmp")
    if tmp is not None:
        env.setdefault("TMPDIR", str(tmp))
    return {name: mounts.local(value) for name, value in env.items()}


def base_environment(pod: Obj, server_host: str, server_port: int, home: Path) -> dict[str, str]:
    """What every container starts with: the image-like part of this process's environment,
    HOSTNAME, HOME, and the `kubernetes` Service's variables pointing at the real API server
    (a kubelet sets them to the Service's cluster IP, which nothing routes here)."""
    env = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    env.update({
        "HOSTNAME": pod["metadata"]["name"], "HOME": str(home),
        "KUBERNETES_SERVICE_HOST": server_host, "KUBERNETES_SERVICE_PORT": str(server_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(server_port),
    })
    return env


def _write(folder: Path, files: Mapping[str, bytes], mode: int) -> None:
    for relative, content in files.items():
        if relative.startswith("/") or ".." in Path(relative).parts:
            raise PodConfigError(f"volume item path {relative!r} leaves the volume")
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)


def _items(values: Mapping[str, bytes], items: list[Obj] | None, where: str) -> dict[str, bytes]:
    if not items:
        return dict(values)
    chosen: dict[str, bytes] = {}
    for item in items:
        if item["key"] not in values:
            raise PodConfigError(f"couldn't find key {item['key']} in {where}")
        chosen[item["path"]] = values[item["key"]]
    return chosen


def write_volume(volume: Obj, folder: Path, pod: Obj, sources: Sources,
                 token: Callable[[Obj], str]) -> None:
    """Write one volume's files into `folder`; `token(source)` makes a serviceAccountToken."""
    folder.mkdir(parents=True, exist_ok=True)
    name = volume["name"]
    if "emptyDir" in volume:
        return
    if "secret" in volume or "configMap" in volume:
        kind, spec = (("Secret", volume["secret"]) if "secret" in volume
                      else ("ConfigMap", volume["configMap"]))
        ref = spec.get("secretName") or spec.get("name")
        values = sources.data(kind, ref, optional=bool(spec.get("optional")))
        _write(folder, _items(values, spec.get("items"), f"{kind} {ref}"),
               int(spec.get("defaultMode", 0o644)))
        return
    if "downwardAPI" in volume:
        spec = volume["downwardAPI"]
        _write(folder, _downward(pod, spec.get("items") or []), int(spec.get("defaultMode",
                                                                             0o644)))
        return
    if "projected" in volume:
        spec = volume["projected"]
        files: dict[str, bytes] = {}
        for source in spec.get("sources") or []:
            if "secret" in source or "configMap" in source:
                kind, ref = (("Secret", source["secret"]) if "secret" in source
                             else ("ConfigMap", source["configMap"]))
                values = sources.data(kind, ref["name"], optional=bool(ref.get("optional")))
                files.update(_items(values, ref.get("items"), f"{kind} {ref['name']}"))
            elif "downwardAPI" in source:
                files.update(_downward(pod, source["downwardAPI"].get("items") or []))
            elif "serviceAccountToken" in source:
                account = source["serviceAccountToken"]
                files[account["path"]] = token(account).encode()
            else:
                raise PodConfigError(f"volume {name}: projected source {sorted(source)} is not "
                                     f"supported by the test node agent")
        _write(folder, files, int(spec.get("defaultMode", 0o644)))
        return
    raise PodConfigError(f"volume {name}: only secret, configMap, emptyDir, downwardAPI and "
                         f"projected volumes are supported by the test node agent, not "
                         f"{sorted(set(volume) - {'name'})}")


def _downward(pod: Obj, items: list[Obj]) -> dict[str, bytes]:
    files = {}
    for item in items:
        if "fieldRef" not in item:
            raise PodConfigError("downwardAPI: only fieldRef items are supported by the test "
                                 "node agent")
        files[item["path"]] = field_value(pod, item["fieldRef"]["fieldPath"]).encode()
    return files


def mount_table(container: Obj, volumes: Mapping[str, Path]) -> MountTable:
    """The container's volumeMounts as mountPath -> local path (subPath honoured)."""
    table = MountTable()
    for mount in container.get("volumeMounts") or []:
        if mount["name"] not in volumes:
            raise PodConfigError(f"volumeMount {mount['name']!r} names no volume of the pod")
        local = volumes[mount["name"]]
        if mount.get("subPath"):
            local = local / mount["subPath"]
        table.paths[mount["mountPath"]] = local
    return table
