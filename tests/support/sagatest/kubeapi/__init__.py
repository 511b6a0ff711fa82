"""A Kubernetes API stand-in for tests: real kubectl, kopf and the `kubernetes` client talk to it.

Test infrastructure, not product code (/work/shared/reference/kubernetes.md §3 is its checklist).

Served: legacy discovery, /version, an OpenAPI v3 index (so `kubectl apply` validates
server-side), built-in kinds from `resources.BUILTINS` and every applied CRD; global
resourceVersions, `generation` bumped on spec changes only, CRD schema defaults; list and watch
with label/field selectors, replay from a resourceVersion, 410 Gone in-stream after `compact()`,
bookmarks and watch-list (`sendInitialEvents`); merge, JSON (with `test`) and, for built-ins only,
strategic merge patches (415 for custom resources); a simplified server-side apply (create, or
merge the applied config; no field ownership); protobuf bodies of ConfigMaps and Secrets (what
kubectl's `create configmap|secret` and helm's release storage send); the status subresource
split; finalizers and deletionTimestamp; pods/eviction; Table output with printer columns;
errors as metav1.Status.

Not served: protobuf bodies of other kinds (415: use `kubectl apply -f` / `create -f`), CBOR,
field ownership and apply conflicts, RBAC, admission (webhooks, ValidatingAdmissionPolicy), CEL
rules, schema validation and pruning, garbage collection by ownerReferences, and kubelets or
controllers (pods and Jobs never run: tests set their status).
"""

from .errors import ApiError
from .resources import PrinterColumn, Registry, ResourceType
from .server import RequestRecord
from .standin import KubeStandIn

__all__ = ["ApiError", "KubeStandIn", "PrinterColumn", "Registry", "RequestRecord",
           "ResourceType"]
