"""The chart's own documents name every Secret the chart reads, in each namespace it is read
from: the shortest install of charts/agentsaga/README.md and the commands at the top of
examples/values-existing-postgres.yaml, each checked against `helm template` of that install.
The chart creates none of these Secrets; a missing one leaves a pod or the migration hook Job
unable to start."""

from __future__ import annotations

import re
import shlex
from typing import Any

from sagatest.chart_tools import (
    CHART,
    EXAMPLE_VALUES,
    find,
    render,
    sidecar_template,
    with_setup_job,
)

README = CHART / "README.md"


def _secrets_of(pod: dict[str, Any]) -> set[str]:
    """The Secrets a pod spec reads: env secretKeyRef, envFrom secretRef, secret volumes."""
    names = set()
    for container in [*pod.get("containers", []), *pod.get("initContainers", [])]:
        for env in container.get("env", []):
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
        names |= {e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e}
    names |= {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    return names


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc["kind"] in ("Deployment", "Job"):
        spec: dict[str, Any] = doc["spec"]["template"]["spec"]
        return spec
    if doc["kind"] == "CronJob":
        spec = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec
    return None


def needed_secrets(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(namespace, name) of each Secret the rendered release reads and does not create: its own
    pods' in the release namespace, the sidecar's (injected, and the Jobs') in every agent
    namespace."""
    needed = set()
    for doc in docs:
        pod = _pod_spec(doc)
        if pod is not None:
            needed |= {(doc["metadata"]["namespace"], name) for name in _secrets_of(pod)}
    template = sidecar_template(docs)
    sidecar = _secrets_of({"containers": [template["container"]], "volumes": template["volumes"]})
    agent_namespaces = {a["metadata"]["namespace"] for a in find(docs, "ServiceAccount")
                        if a["metadata"]["labels"]["app.kubernetes.io/component"] == "sidecar"}
    needed |= {(namespace, name) for namespace in agent_namespaces for name in sidecar}
    # the chart renders no Secret; its setup hook Job makes some in the cluster
    created = {(d["metadata"]["namespace"], d["metadata"]["name"])
               for d in find(with_setup_job(docs), "Secret")}
    return needed - created


def test_the_readmes_shortest_install_lists_every_secret_it_needs_and_where() -> None:
    text = README.read_text()
    install = re.search(r"```\n(helm install .*?)```", text, re.S)
    assert install is not None
    words = shlex.split(install.group(1).replace("\\\n", " "))
    namespace = words[words.index("-n") + 1]
    sets = [arg for i, arg in enumerate(words) if i and words[i - 1] == "--set"]
    docs = render(*(a for s in sets for a in ("--set", s)), release=words[2],
                  namespace=namespace, base=None)
    needed = needed_secrets(docs)
    assert {name for _, name in needed} >= {
        "agentsaga-postgres-operator", "agentsaga-postgres-migrate"}
    # each agent namespace's database credentials are the chart's own: no shared DSN Secret
    assert "agentsaga-postgres" not in {name for _, name in needed}
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    for secret_namespace, name in sorted(needed):
        (row,) = [r for r in rows if r.startswith(f"| `{name}`")]
        assert f"`{secret_namespace}`" in row.split("|")[2], (name, secret_namespace, row)
    # and no more: each row's namespaces are all ones the install reads the Secret in
    for row in rows:
        listed = re.match(r"\| `([^`]+)` \(`[^`]+`\) \|([^|]*)\|", row)
        if listed:
            name = listed.group(1)
            for secret_namespace in re.findall(r"`([^`]+)`", listed.group(2)):
                assert (secret_namespace, name) in needed, row


def test_the_example_values_say_how_to_create_every_secret_they_need() -> None:
    header = "\n".join(line for line in EXAMPLE_VALUES.read_text().splitlines()
                       if line.startswith("#"))
    install = re.search(r"helm install \S+ \S+ -n (\S+)", header)
    assert install is not None
    needed = needed_secrets(render("-f", str(EXAMPLE_VALUES), namespace=install.group(1),
                                   base=None))
    assert len({namespace for namespace, _ in needed}) == 2
    for namespace, name in sorted(needed):
        assert re.search(rf"kubectl -n {namespace} create secret generic {name}\b", header), (
            namespace, name)
