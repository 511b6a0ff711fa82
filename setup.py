"""One import namespace, three folders: `agentsaga/` is the core, `sidecar/` becomes
`agentsaga.sidecar` and `operator/` becomes `agentsaga.operator` (a top-level package named
`operator` would shadow the standard library's)."""

from setuptools import find_packages, setup

MAPPED = {"agentsaga.sidecar": "sidecar", "agentsaga.operator": "operator"}

# agentsaga.bench.peers holds the peers' scripts and pins (data, no __init__.py): named here so
# that setuptools ships it without warning that it would be ignored
packages = find_packages(include=["agentsaga", "agentsaga.*"]) + ["agentsaga.bench.peers"]
for name, folder in MAPPED.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir={"agentsaga": "agentsaga", **MAPPED})
