"""Run a command in a built image the way a kubelet would, without a kubelet: the OCI archive's
layers unpacked into a root filesystem, and `runc run` on a bundle whose config says what the
chart says of the container (read-only root, the image's user, no network but loopback).

    with UnpackedImage(archive) as image:
        result = image.run(["agentsaga", "--help"])

Each run is a container of its own (its own namespaces, a cgroup runc removes); the root
filesystem is unpacked once per `UnpackedImage` and removed on exit.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO, Any

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_runs = itertools.count()


def _blob(tar: tarfile.TarFile, digest: str) -> IO[bytes]:
    found = tar.extractfile("blobs/" + digest.replace(":", "/"))
    if found is None:
        raise FileNotFoundError(f"{tar.name!s} lacks the blob {digest}")
    return found


def read_archive(archive: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, config) of the archive's one image."""
    with tarfile.open(archive) as tar:
        index_file = tar.extractfile("index.json")
        assert index_file is not None
        index = json.loads(index_file.read())
        manifest = json.loads(_blob(tar, index["manifests"][0]["digest"]).read())
        config = json.loads(_blob(tar, manifest["config"]["digest"]).read())
        return manifest, config


def unpack(archive: Path, rootfs: Path) -> None:
    """The image's layers applied in order into `rootfs`, whiteouts included (OCI layer rules)."""
    manifest, _ = read_archive(archive)
    with tarfile.open(archive) as outer:
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=_blob(outer, layer["digest"]), mode="r|*") as tar:
                for member in tar:
                    path = Path(member.name)
                    target = rootfs / path
                    if path.name == OPAQUE:  # the folder's lower content is hidden
                        if target.parent.exists():
                            for child in list(target.parent.iterdir()):
                                _remove(child)
                        continue
                    if path.name.startswith(WHITEOUT):
                        _remove(target.with_name(path.name[len(WHITEOUT):]))
                        continue
                    if (target.exists() or target.is_symlink()) and not (
                            member.isdir() and target.is_dir() and not target.is_symlink()):
                        _remove(target)
                    tar.extract(member, rootfs, set_attrs=True, filter="tar")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


class UnpackedImage:
    """An image's root filesystem in a temporary folder, and `run` to start containers on it."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self._folder = Path(tempfile.mkdtemp(prefix="agentsaga-image-"))
        self.rootfs = self._folder / "rootfs"
        _, self.config = read_archive(archive)

    def __enter__(self) -> UnpackedImage:
        self.rootfs.mkdir()
        unpack(self.archive, self.rootfs)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def run(self, args: list[str] | None = None, *, env: dict[str, str] | None = None,
            read_only: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`args` (default: the image's entrypoint and command) as the image's user, with the
        image's environment and working folder, on a read-only root, in a network namespace of
        its own (loopback only)."""
        image = self.config["config"]
        entrypoint: list[str] = image.get("Entrypoint") or []
        command = args if args is not None else [*entrypoint, *(image.get("Cmd") or [])]
        user, _, group = (image.get("User") or "0:0").partition(":")
        name = f"agentsaga-image-{os.getpid()}-{next(_runs)}"
        bundle = self._folder / name
        bundle.mkdir()
        subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True, capture_output=True)
        spec = json.loads((bundle / "config.json").read_text())
        spec["root"] = {"path": str(self.rootfs), "readonly": read_only}
        spec["hostname"] = name
        process = spec["process"]
        process.update(terminal=False, args=command, cwd=image.get("WorkingDir") or "/",
                       user={"uid": int(user), "gid": int(group or user)},
                       env=[*(image.get("Env") or []),
                            *(f"{k}={v}" for k, v in (env or {}).items())])
        (bundle / "config.json").write_text(json.dumps(spec))
        state = self._folder / "runc-state"
        try:
            return subprocess.run(["runc", "--root", str(state), "run", "--bundle", str(bundle),
                                   name], capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, check=False)
        finally:
            subprocess.run(["runc", "--root", str(state), "delete", "--force", name],
                           capture_output=True, check=False)
