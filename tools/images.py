"""Build the product's images from uv.lock without Docker and without network in the build, into a
cache outside the work tree.

    python -P tools/images.py build               # build what is missing; print the images (JSON)
    python -P tools/images.py context IMAGE DIR   # IMAGE's build context, for `docker build`

Run it with the project's environment (`.venv/bin/python`): its pip downloads the wheels and its
setuptools (the one pyproject.toml pins) builds the product's wheel. The images:

    sidecar   images/sidecar.Dockerfile            agentsaga[stripe]: the sidecar, migrate, the Jobs
    operator  images/operator.Dockerfile           agentsaga[operator]: the operator, prune
    agent     examples/refund/agent.Dockerfile     the refund example's agent (agentsaga's client)
    base      Debian's Python, made here: the PYTHON_IMAGE the three are built on

How, each step on the host unless said:

- base: `mmdebstrap --variant=essential --include=python3-minimal,python3-venv,ca-certificates,
  libstdc++6 bookworm` into a tarball (documentation, manuals, translations and the usrmerge
  package with its perl left out: `MMDEBSTRAP`), then `FROM scratch` + `ADD base.tar /`. Its
  Python is Debian's 3.11.2 (pyproject.toml: >=3.11; the wheels below are CPython 3.11 ones).
  The Dockerfiles keep the pinned python:3.11 base as their default for users.
- the wheelhouse: each image's requirements (images/<image>.requirements.lock, exported from
  uv.lock by tools/lock.py, every pin with its sha256) downloaded with `pip download
  --require-hashes --only-binary=:all:` for the base's platform (manylinux up to glibc 2.36,
  CPython 3.11); the product's wheel built from the current source (its files copied aside,
  `pip wheel --no-build-isolation`).
- `buildah bud --network none --pull-never --runtime runc --layers` of the Dockerfile with that
  wheelhouse as its context (crun, buildah's default runtime, fails on cgroup v1 machines); then
  `buildah push` to an OCI archive, which `ctr -n k8s.io images import` loads.

The cache is `$AGENTSAGA_CACHE/images`, AGENTSAGA_CACHE defaulting to
`${XDG_CACHE_HOME:-~/.cache}/agentsaga` (as tools/controlplane.py's):

    storage/, run/             buildah's image store, whose layer cache the builds share
    base/<key>/                base.tar and the base image's archive, per mmdebstrap recipe
    wheels/<key>/              the downloaded wheels of one requirements file
    product/<key>/             the product's wheel of one source
    <image>/<key>/image.tar    one built image, with image.json (its reference, size, build time)

An image's key is the hash of its dependency layer's key (its requirements file, its Dockerfile,
install.sh, the base) and of the source that makes the product's wheel (and the agent's script).
A change of the source builds only the thin product layer again (buildah reuses the dependency
layer: COPY is cached by content, and the layers before the product's are the same); a change of
the lock, the Dockerfile, install.sh or the base rebuilds the image from the base. Builders wait
for each other (a file lock); archives are written aside and renamed into place when complete.
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = ROOT / "images"
INSTALL_SCRIPT = IMAGES_DIR / "install.sh"
HOST_PACKAGES = ROOT / "tools" / "host_packages.py"

# Measured on a 2-core machine from an empty cache (the base, the wheels, three images): 6.1
# minutes, 11.9 under a load of 12 to 17 (2.5 minutes of CPU). Later runs with an unchanged
# source return in about a second; a change of the source rebuilds only the product layer of
# each image (4.9 minutes under that load, 70 seconds of CPU for the three).
FIRST_BUILD = ("about 6 minutes on 2 cores (12 when other builds share them), with about 80 MB "
               "of Debian packages and wheels to download")

DEBIAN_SUITE = "bookworm"
DEBIAN_PYTHON = "3.11"
"""Debian 12's Python (3.11.2): the wheels downloaded are CPython 3.11 ones."""
GLIBC = (2, 36)
"""Debian 12's glibc: the newest manylinux tag its Python takes."""
MMDEBSTRAP = [
    "mmdebstrap", "--variant=essential",
    # libstdc++6: manylinux wheels (grpcio's) take it from the system, as the policy allows
    "--include=python3-minimal,python3-venv,ca-certificates,libstdc++6",
    # merged /usr by symlinks, as debootstrap makes it: not the usrmerge package, which brings
    # perl (about 50 MB) into the base
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*", DEBIAN_SUITE,
]
"""The base's recipe (the output path is appended); part of the base's key."""
BASE_DOCKERFILE = "FROM scratch\nADD base.tar /\nCMD [\"/usr/bin/python3\"]\n"

PRODUCT_PATHS = ("agentsaga", "sidecar", "operator", "setup.py", "pyproject.toml", "README.md",
                 "client")
"""What the product's wheels are built from: the product's (setup.py maps the three folders into
agentsaga) and the agent side's (client/: `agentsaga-client`, modules of agentsaga/)."""
SKIPPED = ("__pycache__", ".egg-info", ".pyc", ".mypy_cache")


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: Path
    requirements: Path
    app: tuple[Path, ...] = ()
    """Files copied into the context's app/ folder (the agent's script)."""
    wheel: str = "agentsaga"
    """The wheel of this repository it installs: the product's, or the agent side's
    (`agentsaga_client`, what an agent's image needs of agentsaga)."""

    @property
    def repository(self) -> str:
        return f"localhost/agentsaga-{self.name}"


IMAGES = {
    "sidecar": Image("sidecar", IMAGES_DIR / "sidecar.Dockerfile",
                     IMAGES_DIR / "sidecar.requirements.lock"),
    "operator": Image("operator", IMAGES_DIR / "operator.Dockerfile",
                      IMAGES_DIR / "operator.requirements.lock"),
    "agent": Image("agent", ROOT / "examples" / "refund" / "agent.Dockerfile",
                   IMAGES_DIR / "agent.requirements.lock",
                   app=(ROOT / "examples" / "refund" / "agent.py",), wheel="agentsaga_client"),
}


@dataclass(frozen=True)
class Built:
    """One built image: what `build` prints (as JSON) and sagatest.cluster.images reads."""

    reference: str
    archive: str
    size_bytes: int
    """The image's layers, uncompressed (what a container's root filesystem holds)."""
    compressed_bytes: int
    """The same layers gzipped, as the archive holds them (what a registry would send)."""
    build_seconds: float
    """How long the build that made it took (the cached ones keep their first figure)."""


class BuildError(Exception):
    """An image cannot be built here; the message says what failed and what to do."""


def cache_dir() -> Path:
    """`$AGENTSAGA_CACHE/images`; AGENTSAGA_CACHE defaults to
    `${XDG_CACHE_HOME:-~/.cache}/agentsaga`."""
    explicit = os.environ.get("AGENTSAGA_CACHE")
    if explicit:
        return Path(explicit).expanduser() / "images"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "agentsaga" / "images"


def _digest(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(f"{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def _source_files(paths: tuple[str, ...]) -> list[Path]:
    files: list[Path] = []
    for name in paths:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files += [p for p in candidates
                  if not any(part.endswith(SKIPPED) for part in p.relative_to(ROOT).parts)]
    return files


def base_key() -> str:
    return _digest(" ".join(MMDEBSTRAP), BASE_DOCKERFILE, platform.machine())


def product_key() -> str:
    """The source the product's wheel is made of, and the setuptools that builds it."""
    parts: list[bytes | str] = [importlib.metadata.version("setuptools")]
    for path in _source_files(PRODUCT_PATHS):
        parts += [path.relative_to(ROOT).as_posix(), path.read_bytes()]
    return _digest(*parts)


def deps_key(image: Image) -> str:
    """The dependency layer's: the requirements, the Dockerfile, install.sh and the base."""
    return _digest(image.requirements.read_bytes(), image.dockerfile.read_bytes(),
                   INSTALL_SCRIPT.read_bytes(), base_key())


def image_key(image: Image) -> str:
    apps: list[bytes | str] = []
    for path in image.app:
        apps += [path.name, path.read_bytes()]
    return _digest(deps_key(image), product_key(), *apps)


def reference(image: Image) -> str:
    return f"{image.repository}:{image_key(image)}"


def base_reference() -> str:
    return f"localhost/agentsaga-base:{base_key()}"


def _run(command: list[str], what: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, text=True, capture_output=True, check=False,
                            **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise BuildError(f"{what} failed (exit {result.returncode}): {' '.join(command)}\n"
                         f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result  # type: ignore[no-any-return]


def buildah(*args: str) -> list[str]:
    """A buildah command on the cache's own image store (never the machine's)."""
    store = cache_dir()
    return ["buildah", "--root", str(store / "storage"), "--runroot", str(store / "run"),
            "--storage-driver", "overlay", *args]


def _has_image(ref: str) -> bool:
    result = subprocess.run(buildah("inspect", "--type", "image", ref), capture_output=True,
                            check=False)
    return result.returncode == 0


def _push(ref: str, target: Path) -> None:
    """`ref` as an OCI archive at `target` (gzipped layers), written aside and renamed into
    place."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        _run(buildah("push", "--quiet", ref,
                     f"oci-archive:{partial}:{ref}"), f"buildah push {ref}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def archive_sizes(archive: Path) -> tuple[int, int]:
    """(uncompressed, compressed): the sum of the archive's layers as a container's root
    filesystem holds them, and as they are stored and sent."""
    with tarfile.open(archive) as tar:
        def member(digest: str) -> IO[bytes]:
            found = tar.extractfile("blobs/" + digest.replace(":", "/"))
            if found is None:
                raise BuildError(f"{archive} lacks the blob {digest}")
            return found

        index = json.loads(member_named(tar, "index.json").read())
        manifest = json.loads(member(index["manifests"][0]["digest"]).read())
        uncompressed = compressed = 0
        for layer in manifest["layers"]:
            compressed += int(layer["size"])
            with member(layer["digest"]) as blob:
                stream: IO[bytes] = blob
                if layer["mediaType"].endswith("gzip"):
                    stream = gzip.GzipFile(fileobj=blob)  # type: ignore[assignment]
                while chunk := stream.read(1 << 20):
                    uncompressed += len(chunk)
        return uncompressed, compressed


def member_named(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    found = tar.extractfile(name)
    if found is None:
        raise BuildError(f"{tar.name!s} lacks {name}")
    return found


def ensure_base() -> tuple[str, Path]:
    """The base image in the store (made from the mmdebstrap tarball, made if missing) and its
    archive."""
    folder = cache_dir() / "base" / base_key()
    folder.mkdir(parents=True, exist_ok=True)
    tarball, archive, ref = folder / "base.tar", folder / "image.tar", base_reference()
    if not tarball.exists():
        print(f"making the Debian {DEBIAN_SUITE} Python base with mmdebstrap (about a minute) ...",
              file=sys.stderr, flush=True)
        partial = folder / f".base.{os.getpid()}.tar"
        try:
            _run([*MMDEBSTRAP, str(partial)], "mmdebstrap")
            os.replace(partial, tarball)
        finally:
            partial.unlink(missing_ok=True)
    if not _has_image(ref):
        (folder / "Dockerfile").write_text(BASE_DOCKERFILE)
        _run(buildah("bud", "--runtime", "runc", "--network", "none", "--pull-never",
                     "--layers", "-f", str(folder / "Dockerfile"), "-t", ref, str(folder)),
             "buildah bud of the base")
    if not archive.exists():
        _push(ref, archive)
    return ref, archive


def platforms() -> list[str]:
    """The manylinux tags Debian 12's glibc accepts, newest first, on this machine's arch."""
    arch = platform.machine()
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(GLIBC[1], 16, -1)]
    tags += [f"manylinux2014_{arch}"]
    if arch == "x86_64":
        tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    return tags


def ensure_wheels(requirements: Path) -> Path:
    """The locked wheels of `requirements` for the base's platform, downloaded on the host."""
    folder = cache_dir() / "wheels" / _digest(requirements.read_bytes(), platform.machine())
    done = folder / ".complete"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--require-hashes", "--only-binary=:all:", "--no-deps",
               "--python-version", DEBIAN_PYTHON, "--implementation", "cp",
               "--abi", "cp" + DEBIAN_PYTHON.replace(".", "")]
    for tag in platforms():
        command += ["--platform", tag]
    _run([*command, "--dest", str(folder), "-r", str(requirements)],
         f"downloading the wheels of {requirements.name}")
    done.touch()
    return folder


def ensure_product() -> Path:
    """The product's wheel and the agent side's of the current source, built from a copy of it."""
    folder = cache_dir() / "product" / product_key()
    if list(folder.glob("agentsaga-*.whl")) and list(folder.glob("agentsaga_client-*.whl")):
        return folder
    with tempfile.TemporaryDirectory(prefix="agentsaga-wheel-") as temporary:
        source = Path(temporary) / "src"
        for path in _source_files(PRODUCT_PATHS):
            target = source / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        out = Path(temporary) / "out"
        env = {**os.environ, "PYTHON": sys.executable,
               "AGENTSAGA_WHEEL_FLAGS": "--no-build-isolation --quiet"}
        _run(["sh", str(INSTALL_SCRIPT), "wheel", str(source), str(out)],
             "building the product's wheel", env=env)
        _run(["sh", str(INSTALL_SCRIPT), "wheel", str(source / "client"), str(out)],
             "building the agent side's wheel", env=env)
        folder.mkdir(parents=True, exist_ok=True)
        for wheel in [*out.glob("agentsaga-*.whl"), *out.glob("agentsaga_client-*.whl")]:
            shutil.copy2(wheel, folder / wheel.name)
    return folder


def write_context(image: Image, target: Path) -> Path:
    """`image`'s build context at `target`: install.sh, requirements.lock, wheels/ (linked from
    the cache), product/ (the product's wheel, or the agent side's) and app/ (the agent's
    script)."""
    wheels, product = ensure_wheels(image.requirements), ensure_product()
    if target.exists():
        shutil.rmtree(target)
    (target / "wheels").mkdir(parents=True)
    (target / "product").mkdir()
    shutil.copy2(INSTALL_SCRIPT, target / "install.sh")
    shutil.copy2(image.requirements, target / "requirements.lock")
    for wheel in wheels.glob("*.whl"):
        os.link(wheel, target / "wheels" / wheel.name)
    for wheel in product.glob(f"{image.wheel}-*.whl"):
        shutil.copy2(wheel, target / "product" / wheel.name)
    if image.app:
        (target / "app").mkdir()
        for path in image.app:
            shutil.copy2(path, target / "app" / path.name)
    return target


KEPT = 4
"""Built images kept per name (the most recently used): other checkouts of other sources share
the cache; older archives and their store entries are removed after a build."""


def prune(image: Image) -> None:
    """Remove all but the KEPT most recently used builds of `image` (archive and store entry)."""
    folders = sorted((f for f in (cache_dir() / image.name).iterdir()
                      if (f / "image.json").exists()),
                     key=lambda f: (f / "image.json").stat().st_mtime, reverse=True)
    for folder in folders[KEPT:]:
        ref = json.loads((folder / "image.json").read_text())["reference"]
        subprocess.run(buildah("rmi", ref), capture_output=True, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def build_image(image: Image, base: str) -> Built:
    folder = cache_dir() / image.name / image_key(image)
    archive, record = folder / "image.tar", folder / "image.json"
    if record.exists() and archive.exists():
        os.utime(record)  # used now: kept by `prune`
        return Built(**json.loads(record.read_text()))
    started = time.monotonic()
    ref = reference(image)
    folder.mkdir(parents=True, exist_ok=True)
    context = write_context(image, folder / "context")
    try:
        _run(buildah("bud", "--runtime", "runc", "--network", "none", "--pull-never", "--layers",
                     "--build-arg", f"PYTHON_IMAGE={base}", "-f", str(image.dockerfile),
                     "-t", ref, str(context)), f"buildah bud of the {image.name} image")
        _push(ref, archive)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    size, compressed = archive_sizes(archive)
    built = Built(reference=ref, archive=str(archive), size_bytes=size,
                  compressed_bytes=compressed, build_seconds=round(time.monotonic() - started, 1))
    record.write_text(json.dumps(asdict(built), indent=2) + "\n")
    prune(image)
    print(f"built {ref} ({built.size_bytes / 1e6:.0f} MB, {built.compressed_bytes / 1e6:.0f} MB "
          f"compressed) in {built.build_seconds:.0f} s",
          file=sys.stderr, flush=True)
    return built


def _all_cached() -> bool:
    folders = [cache_dir() / image.name / image_key(image) for image in IMAGES.values()]
    folders.append(cache_dir() / "base" / base_key())
    return all((folder / "image.tar").exists() for folder in folders) and all(
        (folder / "image.json").exists() for folder in folders[:-1])


def built_base() -> Built:
    folder = cache_dir() / "base" / base_key()
    archive = folder / "image.tar"
    record = folder / "image.json"
    if not record.exists():
        size, compressed = archive_sizes(archive)
        record.write_text(json.dumps(asdict(Built(
            reference=base_reference(), archive=str(archive), size_bytes=size,
            compressed_bytes=compressed, build_seconds=0.0)), indent=2) + "\n")
    return Built(**json.loads(record.read_text()))


def ensure_built() -> dict[str, Built]:
    """Every image, built if missing: {"sidecar", "operator", "agent", "base"}."""
    if not _all_cached():
        _run([sys.executable, "-P", str(HOST_PACKAGES)], "installing the host's packages")
        cache_dir().mkdir(parents=True, exist_ok=True)
        with open(cache_dir() / ".lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print("another build of the images is under way; waiting for it ...",
                      file=sys.stderr, flush=True)
                fcntl.flock(lock, fcntl.LOCK_EX)
            if not _all_cached():
                print(f"building the images sidecar, operator, agent from uv.lock (first build "
                      f"only: {FIRST_BUILD}) ...", file=sys.stderr, flush=True)
                started = time.monotonic()
                base, _ = ensure_base()
                for image in IMAGES.values():
                    build_image(image, base)
                print(f"images ready in {(time.monotonic() - started) / 60:.1f} minutes "
                      f"under {cache_dir()}", file=sys.stderr, flush=True)
    built = {name: build_image(image, base_reference()) for name, image in IMAGES.items()}
    built["base"] = built_base()
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the images that are missing; print them as JSON")
    context = sub.add_parser("context", help="write an image's build context (for docker build)")
    context.add_argument("image", choices=sorted(IMAGES))
    context.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "context":
            print(write_context(IMAGES[args.image], args.dir.resolve()))
        else:
            built = ensure_built()
            print(json.dumps({name: asdict(b) for name, b in built.items()}, indent=2))
    except BuildError as error:
        print(f"tools/images.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
