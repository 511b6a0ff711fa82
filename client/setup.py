"""The agent-side distribution's modules: the client, the adapters and what they import of the
product's source (the folder above), nothing else. tests/unit/test_client_distribution.py fails
when one of these imports a module of agentsaga that is not here, or a package that is not
among pyproject.toml's dependencies."""

from setuptools import setup
from setuptools.command.build_py import build_py

WHOLE = ("agentsaga.adapters", "agentsaga.client", "agentsaga.telemetry", "agentsaga.v1")
"""Packages the agent side holds whole."""

PARTS = {
    "agentsaga": ("__init__", "calls", "environment", "errors", "extras", "grpc_tuning", "keys",
                  "redact", "settings", "states", "time_contract"),
    "agentsaga.saga": ("__init__", "argument_types", "registry", "wording"),
}
"""The modules of the packages it needs only part of."""


class AgentSide(build_py):
    """The product's build, keeping only the modules above."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        found = super().find_package_modules(package, package_dir)
        return [(p, m, f) for p, m, f in found if p in WHOLE or m in PARTS.get(p, ())]


setup(packages=[*PARTS, *WHOLE], package_dir={"agentsaga": "../agentsaga"},
      cmdclass={"build_py": AgentSide})
