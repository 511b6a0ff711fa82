"""The rendered chart's identities, RBAC and approval policy loaded into the API stand-in, as
`helm install` would create them (release `saga` in `agentsaga-system`): every ServiceAccount,
Role, ClusterRole, binding, the ValidatingAdmissionPolicy and its binding, applied with the real
kubectl. The stand-in then authorizes each request by the chart's RBAC and evaluates the policy
with the request's real userInfo.

`operator_kubeconfig` gives a kubeconfig whose token is the chart's operator ServiceAccount (what
the operator pod mounts), so an operator started with it can do what the chart grants, no more.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from sagatest.chart_tools import CHART, render
from sagatest.kube_fixtures import Kube
from sagatest.kubeapi.kubeconfig import write_kubeconfig

RELEASE_NS = "agentsaga-system"
OPERATOR_SA = "saga-agentsaga-operator"
OPERATOR = f"system:serviceaccount:{RELEASE_NS}:{OPERATOR_SA}"
APPROVER_ROLE = "agentsaga-approver"
KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
PEERINGS = ("ClusterKopfPeering", "KopfPeering")
PEERING_CRDS = CHART / "crds" / "kopfpeerings.kopf.dev.yaml"


def install_chart_rbac(kube: Kube, agent_namespaces: Sequence[str], *values: str,
                       peering: bool = False) -> None:
    """Create the release namespace and `agent_namespaces` (where missing) and apply the chart
    rendered with `sidecar.namespaces` = `agent_namespaces` and `values` (`--set` arguments),
    its RBAC and policy kinds only; with `peering`, also kopf's peering CRDs and the chart's
    peering objects."""
    for name in (RELEASE_NS, *agent_namespaces):
        if kube.get("v1", "namespaces", None, name) is None:
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    namespaces = ",".join(agent_namespaces)
    kinds = KINDS + (PEERINGS if peering else ())
    if peering:
        kube.apply_file(PEERING_CRDS)
    docs = [d for d in render("--set", f"sidecar.namespaces={{{namespaces}}}", *values)
            if d["kind"] in kinds]
    manifests = Path(kube.workdir) / "chart-rbac.json"
    manifests.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    applied = kube.kubectl("apply", "--validate=false", "-f", str(manifests))
    assert applied.returncode == 0, applied.stderr


def bind_user(kube: Kube, namespace: str, name: str, kind: str, role: str, user: str) -> None:
    """A RoleBinding of `role` (a Role or ClusterRole) to User `user` in `namespace`."""
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": name, "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind,
                             "name": role},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                               "name": user}]})


def operator_token(kube: Kube) -> str:
    """The bearer token of the chart's operator ServiceAccount (what its pod mounts)."""
    return kube.service_account_token(RELEASE_NS, OPERATOR_SA)


def operator_kubeconfig(kube: Kube) -> Path:
    """A kubeconfig authenticating as the chart's operator ServiceAccount."""
    return write_kubeconfig(Path(kube.workdir) / "operator-kubeconfig", kube.url,
                            operator_token(kube))
