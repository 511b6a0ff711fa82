"""Calling kubectl back: the binary the plugin was run from (or $KUBECTL), with the caller's
--kubeconfig, --context and namespace."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from typing import Any


class PluginError(Exception):
    """Something the user can fix; printed as `kubectl agentsaga: ...`, exit 1."""


@dataclass(frozen=True)
class Kubectl:
    namespace: str | None = None
    context: str | None = None
    kubeconfig: str | None = None

    def _base(self) -> list[str]:
        command = [os.environ.get("KUBECTL") or "kubectl"]
        if self.kubeconfig:
            command += ["--kubeconfig", self.kubeconfig]
        if self.context:
            command += ["--context", self.context]
        return command

    def run(self, *args: str, namespaced: bool = True) -> str:
        command = self._base() + list(args)
        if namespaced and self.namespace:
            command += ["-n", self.namespace]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            raise PluginError(f"{command[0]!r} is not on PATH (set KUBECTL to its path)") from None
        if done.returncode != 0:
            raise PluginError(done.stderr.strip() or f"kubectl {' '.join(args)} failed")
        return done.stdout

    def json(self, *args: str, namespaced: bool = True) -> Any:
        return json.loads(self.run(*args, "-o", "json", namespaced=namespaced))

    def agentrun(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.json("get", "agentrun", name)
        return found

    def username(self) -> str:
        """Who the API server says the caller is (`kubectl auth whoami`); where that API is not
        served, the kubeconfig's user of the current context."""
        try:
            name = self.run("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}",
                            namespaced=False).strip()
        except PluginError:
            name = ""
        if name:
            return name
        name = self.run("config", "view", "--minify", "-o",
                        "jsonpath={.contexts[0].context.user}", namespaced=False).strip()
        if not name:
            raise PluginError("cannot tell who you are (kubectl auth whoami failed and the "
                              "kubeconfig names no user): pass --approver NAME")
        return name
