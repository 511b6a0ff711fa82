"""The product's images, built from uv.lock by tools/images.py (buildah, no network in the build,
a Debian Python base made by mmdebstrap) and run the way a kubelet runs them: the OCI archive
unpacked, `runc` with a read-only root, the image's user (65532) and no network but loopback.

The images are built once and cached outside the work tree (sagatest.cluster.images); a change
of the source rebuilds only each image's thin product layer.
"""

from __future__ import annotations

import email.parser
import importlib.util
import json
import platform
import re
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from packaging.markers import Marker
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sagatest.cluster.image_run import UnpackedImage, read_archive
from sagatest.cluster.images import BuiltImage, image_records

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = {"sidecar": IMAGES / "sidecar.Dockerfile",
               "operator": IMAGES / "operator.Dockerfile",
               "agent": ROOT / "examples" / "refund" / "agent.Dockerfile"}
LOCKS = {name: IMAGES / f"{name}.requirements.lock" for name in DOCKERFILES}

TODAY_MB = 511
"""The one image of before (python:3.11 slim, every dependency): 511 MB uncompressed."""
BUDGET_MB = {"sidecar": 260, "operator": 390, "agent": 170, "base": 120}
"""Each image's size, uncompressed, with some room (measured: 232, 351, 142, 106; the agent's
holds the agent side alone, agentsaga-client)."""
DEBIAN_PYTHON = Version("3.11.2")
DEBIAN_MARKERS = {"python_version": "3.11", "python_full_version": str(DEBIAN_PYTHON),
                  "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                  "implementation_name": "cpython", "platform_python_implementation": "CPython",
                  "platform_machine": platform.machine()}
"""The environment markers of the base's Python: what decides which locked wheels it needs."""


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("images_tool", ROOT / "tools" / "images.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


tool = _tool()


@pytest.fixture(scope="module")
def images() -> dict[str, BuiltImage]:
    return image_records()


@pytest.fixture(scope="module")
def sidecar(images: dict[str, BuiltImage]) -> Iterator[UnpackedImage]:
    with UnpackedImage(images["sidecar"].archive) as image:
        yield image


@pytest.fixture(scope="module")
def operator(images: dict[str, BuiltImage]) -> Iterator[UnpackedImage]:
    with UnpackedImage(images["operator"].archive) as image:
        yield image


def _pins(lock: Path, *, on_debian: bool = False) -> dict[str, str]:
    """Each pin of `lock`; with `on_debian`, only those whose marker holds on the base's Python."""
    entries = re.split(r"\n(?=[A-Za-z])", "\n".join(
        line for line in lock.read_text().splitlines()
        if not line.lstrip().startswith("#")).strip())
    pinned: dict[str, str] = {}
    for entry in entries:
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)( ; [^\\]+)? \\\n"
                         r"(\s+--hash=sha256:[0-9a-f]{64}( \\\n)?)+$", entry)
        assert match, entry
        marker = match.group(3)
        if on_debian and marker and not Marker(marker.strip(" ;")).evaluate(DEBIAN_MARKERS):
            continue
        pinned[canonicalize_name(match.group(1))] = match.group(2)
    return pinned


def _installed(image: UnpackedImage, *modules: str) -> dict[str, bool]:
    code = ("import importlib.util, json, sys; print(json.dumps({m: importlib.util.find_spec(m) "
            "is not None for m in sys.argv[1:]}))")
    result = image.run(["python", "-c", code, *modules])
    assert result.returncode == 0, result.stderr
    found: dict[str, bool] = json.loads(result.stdout)
    return found


def test_dockerfiles_install_the_wheelhouse_on_a_base_argument_as_nonroot() -> None:
    for name, path in DOCKERFILES.items():
        text = path.read_text()
        # the base a build argument, pinned by digest for users; the tests pass their own
        assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.11-slim-bookworm@sha256:[0-9a-f]{64}$",
                         text, re.M), name
        assert text.count("FROM ${PYTHON_IMAGE}") == 1, name
        # the dependencies from the context's wheels alone, then the product's wheel on its own
        assert "COPY install.sh requirements.lock /opt/agentsaga/" in text, name
        assert ("RUN --mount=type=bind,source=wheels,target=/wheels \\\n    sh /opt/agentsaga/"
                "install.sh deps /wheels /opt/venv /opt/agentsaga/requirements.lock") in text, name
        assert text.index("install.sh deps") < text.index("COPY product/") < text.index(
            "install.sh product"), name
        assert "USER 65532:65532" in text, name
    assert 'CMD ["sidecar"]' in DOCKERFILES["sidecar"].read_text()
    assert 'CMD ["operator", "--all-namespaces"]' in DOCKERFILES["operator"].read_text()
    script = (IMAGES / "install.sh").read_text()
    assert '--require-hashes --only-binary=:all: --find-links "$wheels" -r "$lock"' in script
    assert "--no-index" in script and "--network" not in script


def test_each_image_installs_its_own_hashed_lock() -> None:
    pins = {name: _pins(lock) for name, lock in LOCKS.items()}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # the agent's image installs the agent side (client/), not the product
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    extras = {"sidecar": ["stripe"], "operator": ["operator"], "agent": []}
    for name, pinned in pins.items():
        wanted = [*(client if name == "agent" else project)["dependencies"],
                  *(r for extra in extras[name] for r in project["optional-dependencies"][extra])]
        for requirement in wanted:
            package = re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0]
            assert canonicalize_name(package) in pinned, \
                f"{requirement} is not in {LOCKS[name].name}: run make lock ARGS="
            specifier = re.sub(r"^\[[^\]]*\]", "", requirement[len(package):]).strip()
            assert Version(pinned[canonicalize_name(package)]) in SpecifierSet(specifier)
    assert not {"kubernetes", "kopf", "jsonpatch", "aiohttp"} & set(pins["sidecar"])
    assert "stripe" in pins["sidecar"]
    assert {"kubernetes", "kopf", "jsonpatch"} <= set(pins["operator"])
    assert "stripe" not in pins["operator"]
    assert not {"kubernetes", "kopf", "stripe", "psycopg", "mcp", "httpx"} & set(pins["agent"])


def test_the_wheelhouse_fits_debians_python(images: dict[str, BuiltImage]) -> None:
    allowed_platforms = {"any", *tool.platforms()}
    for name, lock in LOCKS.items():
        wheels = sorted(tool.ensure_wheels(lock).glob("*.whl"))
        assert {canonicalize_name(parse_wheel_filename(w.name)[0]) for w in wheels} == set(
            _pins(lock, on_debian=True)), name
        for wheel in wheels:
            tags = parse_wheel_filename(wheel.name)[3]
            assert any(tag.platform in allowed_platforms and (
                tag.interpreter in ("py3", "cp311") or (tag.abi == "abi3" and int(
                    tag.interpreter[3:]) <= 11)) for tag in tags), wheel.name
            with zipfile.ZipFile(wheel) as archive:
                metadata_name = next(n for n in archive.namelist()
                                     if n.endswith(".dist-info/METADATA"))
                metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
            requires = metadata.get("Requires-Python")
            assert requires is None or DEBIAN_PYTHON in SpecifierSet(requires), (wheel.name,
                                                                                requires)


def _missing_libraries(image: UnpackedImage) -> list[str]:
    """The shared libraries that a compiled module in the image's environment needs and the image
    lacks (a manylinux wheel takes libstdc++ and libgcc_s from the system, as its policy allows)."""
    result = image.run(["sh", "-c", "find /opt/venv -name '*.so*' -type f -exec ldd {} + "
                        "| grep 'not found' || true"])
    assert result.returncode == 0, result.stderr
    return sorted(set(result.stdout.split("\n")) - {""})


def test_every_compiled_module_finds_its_libraries(sidecar: UnpackedImage,
                                                  operator: UnpackedImage) -> None:
    assert _missing_libraries(sidecar) == []
    assert _missing_libraries(operator) == []
    # and the modules that need them load (gRPC's core needs libstdc++)
    loaded = sidecar.run(["python", "-c", "import grpc, psycopg, pydantic_core; print('ok')"])
    assert loaded.stdout.strip() == "ok", loaded.stderr


def test_the_sidecar_image_runs_read_only_as_nonroot_without_a_network(
        sidecar: UnpackedImage) -> None:
    config = sidecar.config["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["agentsaga"] and config["Cmd"] == ["sidecar"]
    helped = sidecar.run(["agentsaga", "--help"])
    assert helped.returncode == 0, helped.stderr
    assert "sidecar" in helped.stdout and "reconcile" in helped.stdout
    probe = sidecar.run(["sh", "-c", "id -u; id -g; touch /opt/venv/x || echo read-only; "
                         "grep -c : /proc/net/dev"])
    assert probe.stdout.split() == ["65532", "65532", "read-only", "1"], probe  # lo alone
    # Debian's Python, and no installer in the image's environment
    version = sidecar.run(["python", "-c", "import sys; print(sys.version.split()[0])"])
    assert version.stdout.strip() == str(DEBIAN_PYTHON)
    assert not (sidecar.rootfs / "opt" / "venv" / "bin" / "pip").exists()
    # uid 65532 has no name: the commands of a person's input start (a Job's too), and ask
    # for the person's name only when one is recorded
    for command in ("corrections", "settle", "approve"):
        result = sidecar.run(["agentsaga", command, "--help"])
        assert result.returncode == 0, (command, result.stderr)
    nameless = sidecar.run(["python", "-c", "from agentsaga.cli.commands import _person\n"
                            "_person(None, '--settler')"])
    assert "say who decides with --settler NAME" in nameless.stderr, nameless


def test_the_sidecar_image_lacks_kopf_and_kubernetes(sidecar: UnpackedImage) -> None:
    assert _installed(sidecar, "kubernetes", "kopf", "jsonpatch", "stripe", "grpc", "mcp") == {
        "kubernetes": False, "kopf": False, "jsonpatch": False,
        "stripe": True, "grpc": True, "mcp": True}
    # read-only, without even a /tmp: the chart's migration Job mounts none
    for command in ("sidecar", "migrate", "reconcile", "unwind"):
        result = sidecar.run(["agentsaga", command, "--help"])
        assert result.returncode == 0, (command, result.stderr)
    refused = sidecar.run(["agentsaga", "operator"])
    assert refused.returncode == 2
    assert "needs agentsaga[operator] (kopf is not installed)" in refused.stderr


def test_the_operator_image_lacks_the_stripe_sdk(operator: UnpackedImage) -> None:
    assert operator.config["config"]["Cmd"] == ["operator", "--all-namespaces"]
    assert _installed(operator, "stripe", "kopf", "kubernetes", "jsonpatch") == {
        "stripe": False, "kopf": True, "kubernetes": True, "jsonpatch": True}
    for command in ("operator", "prune"):  # prune: the retention CronJob, no /tmp either
        result = operator.run(["agentsaga", command, "--help"])
        assert result.returncode == 0, (command, result.stderr)
    # a Stripe account configured where the SDK is not: the extra to install, not a traceback
    refused = operator.run(["agentsaga", "connectors", "check"],
                           env={"AGENTSAGA_STRIPE_API_KEY": "sk_test_x"})
    assert refused.returncode == 2, refused.stderr
    assert "needs agentsaga[stripe] (stripe is not installed)" in refused.stderr


def test_the_agent_image_runs_the_refund_example(images: dict[str, BuiltImage]) -> None:
    with UnpackedImage(images["agent"].archive) as agent:
        assert agent.config["config"]["Entrypoint"] == ["python", "-P", "/opt/agent/agent.py"]
        assert _installed(agent, "agentsaga.client", "grpc", "kubernetes", "stripe", "psycopg",
                          "agentsaga.store", "mcp") == {
            "agentsaga.client": True, "grpc": True, "kubernetes": False, "stripe": False,
            "psycopg": False, "agentsaga.store": False, "mcp": False}
        unnamed = agent.run()  # no EXAMPLE_RUN_ID: it says how to give one
        assert unnamed.returncode == 1
        assert "EXAMPLE_RUN_ID=RUN_ID python agent.py" in unnamed.stderr


def test_a_change_of_the_source_rebuilds_only_a_thin_layer(
        images: dict[str, BuiltImage]) -> None:
    for name in ("sidecar", "operator", "agent"):
        manifest, config = read_archive(images[name].archive)
        history = [h for h in config["history"] if not h.get("empty_layer")]
        assert len(history) == len(manifest["layers"])
        product = next(i for i, h in enumerate(history) if "COPY" in h.get("created_by", "")
                       and "product" in h.get("created_by", "") or "install.sh product"
                       in h.get("created_by", ""))
        # the layers from the product's wheel on: under 3 MB (gzipped) of the image's ~80 MB
        thin = sum(int(layer["size"]) for layer in manifest["layers"][product:])
        assert thin < 3_000_000, (name, thin)
    # the keys: the dependency layer's key does not depend on the source, the image's does
    assert "product" not in tool.deps_key.__code__.co_names
    assert "product_key" in tool.image_key.__code__.co_names


def test_the_build_runs_without_a_network(images: dict[str, BuiltImage],
                                          tmp_path: Path) -> None:
    # what `--network none` gives a build step: loopback alone (the images' steps installed
    # everything from their context)
    (tmp_path / "Dockerfile").write_text(
        f"FROM {images['base'].reference}\n"
        "RUN test \"$(grep -c : /proc/net/dev)\" = 1 && grep -q '^ *lo:' /proc/net/dev\n")
    result = subprocess.run(tool.buildah("bud", "--runtime", "runc", "--network", "none",
                                         "--pull-never", "-f", str(tmp_path / "Dockerfile"),
                                         str(tmp_path)),
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    source = (ROOT / "tools" / "images.py").read_text()
    assert source.count('"bud", "--runtime", "runc", "--network", "none", "--pull-never"') == 2


def test_the_images_import_into_containerd(images: dict[str, BuiltImage],
                                           tmp_path: Path) -> None:
    socket = tmp_path / "containerd.sock"
    (tmp_path / "config.toml").write_text(
        f'version = 2\nroot = "{tmp_path / "root"}"\nstate = "{tmp_path / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{socket}"\n[ttrpc]\n  address = "{socket}.ttrpc"\n')
    with open(tmp_path / "containerd.log", "w") as log:
        daemon = subprocess.Popen(["containerd", "--config", str(tmp_path / "config.toml")],
                                  stdout=log, stderr=subprocess.STDOUT)
    ctr = ["ctr", "--address", str(socket), "--namespace", "k8s.io"]
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([*ctr, "version"], capture_output=True).returncode != 0:
            assert daemon.poll() is None, (tmp_path / "containerd.log").read_text()
            assert time.monotonic() < deadline, "containerd did not answer in 60 s"
            time.sleep(0.2)
        for name in ("sidecar", "operator", "agent"):
            imported = subprocess.run([*ctr, "images", "import", "--no-unpack",
                                       str(images[name].archive)],
                                      capture_output=True, text=True, timeout=300, check=False)
            assert imported.returncode == 0, imported.stderr
        listed = subprocess.run([*ctr, "images", "ls", "--quiet"], capture_output=True,
                                text=True, check=True).stdout.split()
        assert {images[n].reference for n in ("sidecar", "operator", "agent")} <= set(listed)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def test_image_sizes(images: dict[str, BuiltImage]) -> None:
    sizes = {name: round(record.size_bytes / 1e6) for name, record in images.items()}
    print(f"image sizes, uncompressed (MB; {TODAY_MB} before): {sizes}; compressed: "
          f"{ {n: round(r.compressed_bytes / 1e6) for n, r in images.items()} }")
    for name, budget in BUDGET_MB.items():
        assert sizes[name] <= budget, (name, sizes[name], budget)
    assert max(sizes.values()) < TODAY_MB
