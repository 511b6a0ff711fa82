"""One import namespace, three folders: `agentsaga/` is the core, `sidecar/` becomes
`agentsaga.sidecar` and `operator/` becomes `agentsaga.operator` (a top-level package named
`operator` would shadow the standard library's). The lab (world, demo, chaos, bench) is a
distribution of its own, in lab/."""

from setuptools import find_packages, setup

MAPPED = {"agentsaga.sidecar": "sidecar", "agentsaga.operator": "operator"}

packages = find_packages(include=["agentsaga", "agentsaga.*"])
for name, folder in MAPPED.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir={"agentsaga": "agentsaga", **MAPPED})
