"""The kinds the stand-in serves: a table of built-ins plus whatever CRDs are applied."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    priority: int = 0
    format: str = ""
    description: str = ""


@dataclass(frozen=True)
class ResourceType:
    """One served resource at one group/version."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status", "eviction"
    printer_columns: tuple[PrinterColumn, ...] = ()
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    custom: bool = False  # served from a CRD (strategic merge patch is refused)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: the same objects are visible at every served version of a group."""
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def describe(self) -> str:
        """The resource as kubectl names it in errors: `agentruns.agentsaga.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _b(
    gv: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    cats: tuple[str, ...] = (),
    sub: tuple[str, ...] = (),
) -> ResourceType:
    group, _, version = gv.rpartition("/")
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        singular=kind.lower(),
        kind=kind,
        namespaced=namespaced,
        short_names=short,
        categories=cats,
        subresources=sub,
    )


ALL = ("all",)

BUILTINS: tuple[ResourceType, ...] = (
    _b("v1", "namespaces", "Namespace", namespaced=False, short=("ns",), sub=("status",)),
    _b("v1", "pods", "Pod", short=("po",), cats=ALL, sub=("status", "eviction")),
    _b("v1", "services", "Service", short=("svc",), cats=ALL, sub=("status",)),
    _b("v1", "configmaps", "ConfigMap", short=("cm",)),
    _b("v1", "secrets", "Secret"),
    _b("v1", "serviceaccounts", "ServiceAccount", short=("sa",)),
    _b("v1", "events", "Event", short=("ev",)),
    _b("v1", "persistentvolumeclaims", "PersistentVolumeClaim", short=("pvc",), sub=("status",)),
    _b("events.k8s.io/v1", "events", "Event", short=("ev",)),
    _b("batch/v1", "jobs", "Job", cats=ALL, sub=("status",)),
    _b("batch/v1", "cronjobs", "CronJob", short=("cj",), cats=ALL, sub=("status",)),
    _b("apps/v1", "deployments", "Deployment", short=("deploy",), cats=ALL, sub=("status",)),
    _b("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", short=("netpol",)),
    _b("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", short=("pdb",), sub=("status",)),
    _b("rbac.authorization.k8s.io/v1", "roles", "Role"),
    _b("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding"),
    _b("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", namespaced=False),
    _b("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding",
       namespaced=False),
    _b("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations",
       "MutatingWebhookConfiguration", namespaced=False),
    _b("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations",
       "ValidatingWebhookConfiguration", namespaced=False),
    _b("admissionregistration.k8s.io/v1", "validatingadmissionpolicies",
       "ValidatingAdmissionPolicy", namespaced=False, sub=("status",)),
    _b("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings",
       "ValidatingAdmissionPolicyBinding", namespaced=False),
    _b("coordination.k8s.io/v1", "leases", "Lease"),
    _b("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition",
       namespaced=False, short=("crd", "crds"), sub=("status",)),
)

CRD_GROUP = "apiextensions.k8s.io"
CRD_PLURAL = "customresourcedefinitions"


def from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The resource types a CustomResourceDefinition serves (one per served version)."""
    spec = crd["spec"]
    names = spec["names"]
    out: list[ResourceType] = []
    for version in spec.get("versions", []):
        if not version.get("served", True):
            continue
        columns = tuple(
            PrinterColumn(
                name=c["name"],
                type=c.get("type", "string"),
                json_path=c["jsonPath"],
                priority=int(c.get("priority", 0)),
                format=c.get("format", ""),
                description=c.get("description", ""),
            )
            for c in version.get("additionalPrinterColumns", [])
        )
        if not columns:
            columns = (PrinterColumn("Age", "date", ".metadata.creationTimestamp"),)
        sub = ("status",) if "status" in (version.get("subresources") or {}) else ()
        out.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames", ())),
                categories=tuple(names.get("categories", ())),
                subresources=sub,
                printer_columns=columns,
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                custom=True,
            )
        )
    return out


class Registry:
    """Served resource types, looked up by group/version and plural (or kind)."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._from_crd: dict[str, list[ResourceType]] = {}
        for rt in BUILTINS:
            self._add(rt)

    def _add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt

    def register_crd(self, crd: dict[str, Any]) -> None:
        self.unregister_crd(crd["metadata"]["name"])
        types = from_crd(crd)
        self._from_crd[crd["metadata"]["name"]] = types
        for rt in types:
            self._add(rt)

    def unregister_crd(self, name: str) -> None:
        for rt in self._from_crd.pop(name, []):
            self._types.pop((rt.group, rt.version, rt.plural), None)

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    def group_versions(self) -> dict[str, list[str]]:
        """Group name → served versions, the first one preferred ('' is the core group)."""
        out: dict[str, list[str]] = {}
        for rt in self._types.values():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.group == group and rt.version == version]
