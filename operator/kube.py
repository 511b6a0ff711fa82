"""The few Kubernetes calls the operator makes itself (kopf only delivers the events).

Status writes are compare-and-swap: read the newest object, let the caller compute a merge
patch from it, and send that patch with the object's resourceVersion as a precondition; on a
409 (the sidecar or a human wrote in between) read again and recompute. Every status patch is
masked first (`agentsaga.redact`): what the log holds is masked already, but a person's text
(an approval's or a settlement's reason) is copied into messages and conditions as written.
The staged plan's commit arguments are the one part shown with only their card numbers masked:
the approver sees what they approve (`agentsaga.redact.redact_plan`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from agentsaga.operator.config import GROUP, PLURAL, VERSION
from agentsaga.redact import redact_plan, redact_value

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
Mutation = Callable[[Obj], Obj | None]
"""Given the newest AgentRun, the `status` merge patch to write, or None for nothing."""


def masked_status(patch: Obj) -> Obj:
    """A status patch as written: every field masked, `pivot` as a plan (`redact_plan`)."""
    out: Obj = redact_value({k: v for k, v in patch.items() if k != "pivot"})
    if "pivot" in patch:
        out["pivot"] = redact_plan(patch["pivot"])
    return out


class Conflicted(Exception):
    """The object kept changing under us; the caller retries later."""


def api_client() -> client.ApiClient:
    """In-cluster credentials, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


class KubeApi:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.admission = client.AdmissionregistrationV1Api(api)
        self.authentication = client.AuthenticationV1Api(api)
        self._whoami: str | None = None

    # -- AgentRuns -------------------------------------------------------------------------

    def get_run(self, namespace: str, name: str) -> Obj | None:
        try:
            return cast(Obj, self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_run(self, namespace: str, body: Obj) -> bool:
        """Create the AgentRun; False if one of that name exists already."""
        try:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def annotate_run(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"annotations": annotations}},
            _content_type="application/merge-patch+json")

    def update_status(self, namespace: str, name: str, mutate: Mutation,
                      attempts: int = 8, known: Obj | None = None) -> Obj | None:
        """CAS-write the status patch `mutate(newest)`; returns the written object or None.
        `known`: the object as just read (the first attempt starts from it, saving a GET; a
        conflict reads it again)."""
        for _ in range(attempts):
            current, known = known or self.get_run(namespace, name), None
            if current is None:
                return None
            patch = mutate(current)
            if not patch:
                return None
            body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                    "status": masked_status(patch)}
            try:
                return cast(Obj, self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, PLURAL, name, body,
                    _content_type="application/merge-patch+json"))
            except ApiException as exc:
                if exc.status == 409:
                    continue
                if exc.status == 404:
                    return None
                raise
        raise Conflicted(f"agentrun {namespace}/{name} kept changing; will retry")

    # -- admission ---------------------------------------------------------------------------

    def admission_policies(self) -> tuple[list[Obj], list[Obj]]:
        """Every ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding, as JSON."""
        policies = _raw(lambda: self.admission.list_validating_admission_policy(
            _preload_content=False)) or {}
        bindings = _raw(lambda: self.admission.list_validating_admission_policy_binding(
            _preload_content=False)) or {}
        return list(policies.get("items") or []), list(bindings.get("items") or [])

    def whoami(self) -> str | None:
        """This client's username as the API server sees it (a SelfSubjectReview, which every
        authenticated user may create), once; None when it cannot be learnt."""
        if self._whoami is None:
            try:
                review = _raw(lambda: self.authentication.create_self_subject_review(
                    client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1",
                                               kind="SelfSubjectReview"),
                    _preload_content=False)) or {}
            except ApiException:
                return None
            user = ((review.get("status") or {}).get("userInfo") or {}).get("username")
            if not user:
                return None
            self._whoami = str(user)
        return self._whoami

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """The namespace's labels; None when it cannot be read (no RBAC, gone)."""
        try:
            found = _raw(lambda: self.core.read_namespace(namespace, _preload_content=False))
        except ApiException:
            return None
        return None if found is None else dict((found.get("metadata") or {}).get("labels") or {})

    # -- pods and Jobs ---------------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        return _raw(lambda: self.core.read_namespaced_pod(name, namespace,
                                                          _preload_content=False))

    def get_job(self, namespace: str, name: str) -> Obj | None:
        return _raw(lambda: self.batch.read_namespaced_job(name, namespace,
                                                           _preload_content=False))

    def create_job(self, namespace: str, job: Obj) -> bool:
        """Create the Job; False if one of that name exists already (a restart, a peer)."""
        try:
            self.batch.create_namespaced_job(namespace, job)  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True


def _raw(call: Callable[[], Any]) -> Obj | None:
    """The object as the API server sent it (JSON, no model conversion), or None on 404."""
    try:
        response = call()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return cast(Obj, json.loads(response.data))
