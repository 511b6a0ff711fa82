"""A Kubernetes API stand-in for tests: real kubectl, kopf and the `kubernetes` client talk to it.

Test infrastructure, not product code (/work/shared/reference/kubernetes.md §3 is its checklist).

Served over HTTPS (kubectl sends bearer tokens only over TLS; `write_kubeconfig` trusts the
certificate): legacy discovery, /version, an OpenAPI v3 index (so `kubectl apply` validates
server-side), built-in kinds from `resources.BUILTINS` and every applied CRD; global
resourceVersions, `generation` bumped on spec changes only, CRD schema defaults; list and watch
with label/field selectors, replay from a resourceVersion, 410 Gone in-stream after `compact()`,
bookmarks and watch-list (`sendInitialEvents`); merge, JSON (with `test`) and, for built-ins only,
strategic merge patches (415 for custom resources); a simplified server-side apply (create, or
merge the applied config; no field ownership); protobuf bodies of ConfigMaps, Secrets and
SelfSubjectAccessReviews; the status subresource split; finalizers and deletionTimestamp;
pods/eviction; Table output with printer columns; errors as metav1.Status.

Enforced as a real server does (`auth`, `admission`, `schema`): bearer tokens (`add_token`,
`service_account_token`; the kubeconfig's token is an admin in system:masters; unknown tokens
401) and impersonation (`kubectl --as/--as-group`, allowed by the `impersonate` verb); RBAC from
the stored Roles, ClusterRoles and bindings for every request, and `kubectl auth can-i`;
ValidatingAdmissionPolicies with their bindings (Deny, Warn, Audit) evaluated with cel-python and
the request's real userInfo, `authorizer` checks answered by the same RBAC; ownerReferences as
the OwnerReferencesPermissionEnforcement plugin checks them (blockOwnerDeletion needs `update` on
the owner's `finalizers`); pruning and
validation of custom resources against the CRD's structural schema and its CEL rules; request
bodies over 3 MiB (413) and objects over etcd's 1.5 MiB. The Python API (`create`, `patch`, …)
writes the ground truth directly: no authorization and no admission, but the schema and the size
limit still apply.

Not served: protobuf bodies of other kinds (415: use `kubectl apply -f` / `create -f`), CBOR,
field ownership and apply conflicts, admission webhooks, mutating admission policies, aggregated
ClusterRoles, garbage collection by ownerReferences, and kubelets or controllers (pods and Jobs
never run: tests set their status).
"""

from .errors import ApiError
from .resources import PrinterColumn, Registry, ResourceType
from .server import RequestRecord
from .standin import KubeStandIn

__all__ = ["ApiError", "KubeStandIn", "PrinterColumn", "Registry", "RequestRecord",
           "ResourceType"]
