"""Who is asking, and may they: bearer tokens, impersonation headers and RBAC.

Authentication: a bearer token maps to a user (`Authenticator.tokens`); the stand-in's own token
(`ADMIN_TOKEN`, the one in `write_kubeconfig`) is an admin in `system:masters`. A request without a
token is `system:anonymous`; an unknown token is 401. `Impersonate-User` / `Impersonate-Group` /
`Impersonate-Uid` (what `kubectl --as/--as-group/--as-uid` send) switch the identity when the
requester may `impersonate` users, groups or serviceaccounts, as a real server checks.

Authorization is RBAC as kube-apiserver evaluates it: the ClusterRoleBindings and the RoleBindings
of the request's namespace whose subjects match the user (User, Group, ServiceAccount), their
rules' apiGroups / resources (`res`, `res/sub`, `*`, `*/sub`) / resourceNames / verbs, and
nonResourceURLs. `system:masters` may do everything. Discovery, /version, /openapi and the health
endpoints are open to every authenticated user (the default `system:discovery` binding).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ApiError

ADMIN_TOKEN = "stand-in-token"
ADMIN = "stand-in-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
RBAC = "rbac.authorization.k8s.io"
SA_PREFIX = "system:serviceaccount:"
PUBLIC_PATHS = ("/healthz", "/readyz", "/livez", "/version")
DISCOVERY_PREFIXES = ("/api", "/apis", "/openapi")

Obj = dict[str, Any]


@dataclass(frozen=True)
class UserInfo:
    """authentication.k8s.io/v1 UserInfo: what admission sees as `request.userInfo`."""

    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""

    def as_dict(self) -> Obj:
        out: Obj = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        return out


def user(username: str, groups: Iterable[str] = ()) -> UserInfo:
    """A user as a real authenticator reports it: service accounts get their groups."""
    all_groups = list(groups)
    if username.startswith(SA_PREFIX):
        namespace = username[len(SA_PREFIX):].split(":", 1)[0]
        all_groups += ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    if username != "system:anonymous":
        all_groups.append(AUTHENTICATED)
    return UserInfo(username, tuple(dict.fromkeys(all_groups)))


def service_account(namespace: str, name: str) -> UserInfo:
    return user(f"{SA_PREFIX}{namespace}:{name}")


ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))


@dataclass(frozen=True)
class Attributes:
    """What is asked: authorizer.k8s.io attributes of one request."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # a non-resource request when resource is empty

    def describe(self) -> str:
        if not self.resource:
            return f'{self.verb} path "{self.path}"'
        resource = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f' in the namespace "{self.namespace}"' if self.namespace else (
            " at the cluster scope")
        return f'{self.verb} resource "{resource}" in API group "{self.group}"{where}'


def _bucket(objects: Mapping[tuple[str, str], Mapping[tuple[str, str], Obj]],
            plural: str) -> Iterable[tuple[tuple[str, str], Obj]]:
    return objects.get((RBAC, plural), {}).items()


def _subject_matches(subject: Obj, who: UserInfo, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == who.username)
    if kind == "Group":
        return name in who.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return who.username == f"{SA_PREFIX}{namespace}:{name}"
    return False


def _matches(values: list[str] | None, wanted: str) -> bool:
    found = values or []
    return "*" in found or wanted in found


def _resource_matches(resources: list[str], attrs: Attributes) -> bool:
    full = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    for resource in resources:
        if resource in ("*", full):
            return True
        if attrs.subresource and resource == f"*/{attrs.subresource}":
            return True
    return False


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    if not _matches(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.resource:
        return any(url == attrs.path or (url.endswith("*") and attrs.path.startswith(url[:-1]))
                   for url in rule.get("nonResourceURLs") or [])
    if not _matches(rule.get("apiGroups"), attrs.group):
        return False
    if not _resource_matches(rule.get("resources") or [], attrs):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


@dataclass
class Authorizer:
    """RBAC over the stand-in's stored Roles, ClusterRoles and bindings."""

    objects: Mapping[tuple[str, str], Mapping[tuple[str, str], Obj]]

    def _rules(self, kind: str, name: str, namespace: str) -> list[Obj]:
        if kind == "ClusterRole":
            role = self.objects.get((RBAC, "clusterroles"), {}).get(("", name))
        else:
            role = self.objects.get((RBAC, "roles"), {}).get((namespace, name))
        return list((role or {}).get("rules") or [])

    def allowed(self, who: UserInfo, attrs: Attributes) -> bool:
        if MASTERS in who.groups:
            return True
        if not attrs.resource and AUTHENTICATED in who.groups and (
                attrs.path in PUBLIC_PATHS or attrs.path.startswith(DISCOVERY_PREFIXES)):
            return True
        for _, binding in _bucket(self.objects, "clusterrolebindings"):
            if any(_subject_matches(s, who, "") for s in binding.get("subjects") or []):
                ref = binding.get("roleRef") or {}
                if any(rule_allows(r, attrs) for r in self._rules("ClusterRole",
                                                                   ref.get("name", ""), "")):
                    return True
        if not attrs.namespace:
            return False
        for (namespace, _), binding in _bucket(self.objects, "rolebindings"):
            if namespace != attrs.namespace:
                continue
            if any(_subject_matches(s, who, namespace) for s in binding.get("subjects") or []):
                ref = binding.get("roleRef") or {}
                rules = self._rules(ref.get("kind", ""), ref.get("name", ""), namespace)
                if any(rule_allows(r, attrs) for r in rules):
                    return True
        return False

    def require(self, who: UserInfo, attrs: Attributes) -> None:
        if self.allowed(who, attrs):
            return
        resource = attrs.resource or ""
        raise ApiError(
            403,
            f'{_kind_of(attrs)} is forbidden: User "{who.username}" cannot {attrs.describe()}',
            "Forbidden",
            {"name": attrs.name, "group": attrs.group, "kind": resource} if resource else None)


def _kind_of(attrs: Attributes) -> str:
    if not attrs.resource:
        return "forbidden"
    plural = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    return f'{plural} "{attrs.name}"' if attrs.name else plural


@dataclass
class Authenticator:
    """Bearer tokens to users, and impersonation."""

    tokens: dict[str, UserInfo] = field(default_factory=lambda: {
        ADMIN_TOKEN: user(ADMIN, [MASTERS])})

    def identify(self, headers: Mapping[str, str], impersonate_groups: list[str],
                 authorizer: Authorizer) -> UserInfo:
        header = headers.get("Authorization", "")
        if not header:
            who = ANONYMOUS
        else:
            scheme, _, token = header.partition(" ")
            found = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
            if found is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            who = found
        target = headers.get("Impersonate-User", "")
        if not target:
            if impersonate_groups:
                raise ApiError(500, "requested impersonation of groups without a user",
                               "InternalError")
            return who
        checks = [Attributes("impersonate", "", "users", name=target)]
        if target.startswith(SA_PREFIX):
            namespace, _, name = target[len(SA_PREFIX):].partition(":")
            checks = [Attributes("impersonate", "", "serviceaccounts", namespace=namespace,
                                 name=name)]
        checks += [Attributes("impersonate", "", "groups", name=g) for g in impersonate_groups]
        uid = headers.get("Impersonate-Uid", "")
        if uid:
            checks.append(Attributes("impersonate", "authentication.k8s.io", "uids", name=uid))
        for attrs in checks:
            if not authorizer.allowed(who, attrs):
                raise ApiError(
                    403, f'{attrs.resource} "{attrs.name}" is forbidden: User "{who.username}" '
                         f'cannot impersonate resource "{attrs.resource}" in API group '
                         f'"{attrs.group}"', "Forbidden")
        impersonated = user(target, impersonate_groups)
        return UserInfo(impersonated.username, impersonated.groups, uid)
