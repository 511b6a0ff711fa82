"""What the stand-in enforces like a real API server, seen through real kubectl and the Python
client: bearer tokens (401 for unknown ones), impersonation (403 unless allowed), RBAC from Roles
and bindings, ValidatingAdmissionPolicies with the request's userInfo, pruning and validation
against a CRD's structural schema, and the request and object size limits."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sagatest.kube_fixtures import Kube
from sagatest.kubeapi.kubeconfig import write_kubeconfig

AR = "agentsaga.io/v1alpha1"


def api_as(kube: Kube, token: str) -> client.CoreV1Api:
    path = write_kubeconfig(kube.workdir / f"kubeconfig-{token}", kube.url, token=token)
    return client.CoreV1Api(config.new_client_from_config(config_file=str(path)))  # type: ignore[no-untyped-call]


def reader_role(kube: Kube, user: str) -> None:
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": "cm-reader", "namespace": "default"},
                 "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                            "verbs": ["get", "list"], "resourceNames": []}]})
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "cm-reader", "namespace": "default"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": "cm-reader"},
                 "subjects": [{"kind": "User", "name": user,
                               "apiGroup": "rbac.authorization.k8s.io"}]})


def test_tokens_and_rbac(kube: Kube) -> None:
    with pytest.raises(ApiException) as unknown:
        api_as(kube, "nobody-knows-me").list_namespaced_config_map("default")
    assert unknown.value.status == 401
    token = kube.add_token("dana-token", "dana", ("team-a",))
    dana = api_as(kube, token)
    with pytest.raises(ApiException) as denied:
        dana.list_namespaced_config_map("default")
    assert denied.value.status == 403
    assert 'User "dana" cannot list resource "configmaps" in API group "" in the namespace ' \
           '"default"' in json.loads(str(denied.value.body))["message"]
    reader_role(kube, "dana")
    assert dana.list_namespaced_config_map("default").items == []
    with pytest.raises(ApiException) as other_namespace:
        dana.list_namespaced_config_map("kube-system")
    assert other_namespace.value.status == 403
    # a ServiceAccount's token carries its groups
    sa = kube.service_account_token("default", "robot")
    identity = kube.identity(sa)
    assert identity is not None and "system:serviceaccounts:default" in identity.groups


def test_impersonation_needs_the_impersonate_verb(kube: Kube) -> None:
    reader_role(kube, "erin")
    assert kube.kubectl("--as=erin", "get", "configmaps").returncode == 0
    denied = kube.kubectl("--as=erin", "create", "configmap", "x")
    assert denied.returncode != 0
    assert 'User "erin" cannot create resource "configmaps"' in denied.stderr
    kube.add_token("frank-token", "frank")
    frank = kube.kubectl("--token=frank-token", "--as=erin", "get", "configmaps")
    assert frank.returncode != 0
    assert 'User "frank" cannot impersonate resource "users"' in frank.stderr


def policy(actions: list[str]) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": "owner-label"},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{
                      "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                      "resources": ["configmaps"]}]},
                  "validations": [{
                      "expression": "has(object.metadata.labels) && "
                                    "'owner' in object.metadata.labels && "
                                    "object.metadata.labels.owner == request.userInfo.username",
                      "messageExpression": "'label owner must be ' + request.userInfo.username",
                      "reason": "Forbidden"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "owner-label"},
         "spec": {"policyName": "owner-label", "validationActions": actions}},
    ]


def configmap(name: str, owner: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": name, "labels": {"owner": owner}}})


def test_admission_policy_sees_the_requesting_user(kube: Kube) -> None:
    for doc in policy(["Deny"]):
        kube.create(doc)
    denied = kube.kubectl("--as=gina", "--as-group=system:masters", "apply", "-f", "-",
                          input=configmap("one", "someone-else"))
    assert denied.returncode != 0
    assert ("ValidatingAdmissionPolicy 'owner-label' with binding 'owner-label' denied "
            "request: label owner must be gina") in denied.stderr
    allowed = kube.kubectl("--as=gina", "--as-group=system:masters", "apply", "-f", "-",
                           input=configmap("two", "gina"))
    assert allowed.returncode == 0, allowed.stderr
    kube.patch("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", None,
               "owner-label", {"spec": {"validationActions": ["Warn"]}})
    warned = kube.kubectl("apply", "-f", "-", input=configmap("three", "gina"))
    assert warned.returncode == 0, warned.stderr
    assert "Warning: Validation failed for ValidatingAdmissionPolicy 'owner-label'" in (
        warned.stderr)
    assert kube.get("v1", "configmaps", "default", "three") is not None


def test_custom_resources_are_pruned_and_validated(kube_with_crds: Kube) -> None:
    run = {"apiVersion": AR, "kind": "AgentRun", "metadata": {"name": "r1"},
           "spec": {"agent": "refunder", "mystery": {"deep": 1}}}
    created = kube_with_crds.kubectl("apply", "--validate=false", "-f", "-",
                                     input=json.dumps(run))
    assert created.returncode == 0, created.stderr
    stored = kube_with_crds.get(AR, "agentruns", "default", "r1")
    assert stored is not None and "mystery" not in stored["spec"]
    bad = {**run, "metadata": {"name": "r2"},
           "spec": {"agent": "refunder", "onOrphan": "explode", "orphanGracePeriodSeconds": "x"}}
    refused = kube_with_crds.kubectl("apply", "--validate=false", "-f", "-",
                                     input=json.dumps(bad))
    assert refused.returncode != 0
    assert 'spec.onOrphan: Unsupported value: "explode": supported values: "unwind", ' \
           '"reconcile", "wait"' in refused.stderr
    assert "spec.orphanGracePeriodSeconds: Invalid value" in refused.stderr
    assert kube_with_crds.get(AR, "agentruns", "default", "r2") is None
    # the CRD's CEL rule: spec.runId is immutable once set
    kube_with_crds.patch(AR, "agentruns", "default", "r1", {"spec": {"runId": "run-1"}})
    changed = kube_with_crds.kubectl("patch", "agentrun", "r1", "--type=merge", "-p",
                                     '{"spec":{"runId":"run-2"}}')
    assert changed.returncode != 0
    assert 'spec.runId: Invalid value: "run-2": runId is immutable' in changed.stderr


def test_objects_over_etcds_limit_are_refused(kube_with_crds: Kube) -> None:
    big = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
           "data": {"blob": "x" * (1536 * 1024 + 1)}}
    too_large = kube_with_crds.kubectl("apply", "--validate=false", "--server-side", "-f", "-",
                                       input=json.dumps(big))
    assert too_large.returncode != 0
    assert "etcdserver: request is too large" in too_large.stderr
    huge = {**big, "data": {"blob": "x" * (3 * 1024 * 1024 + 1)}}
    body = kube_with_crds.kubectl("create", "--validate=false", "-f", "-", input=json.dumps(huge))
    assert body.returncode != 0 and "Request entity too large" in body.stderr
    assert kube_with_crds.get("v1", "configmaps", "default", "big") is None


def test_block_owner_deletion_needs_update_on_the_owners_finalizers(kube: Kube) -> None:
    """OwnerReferencesPermissionEnforcement: a ConfigMap owned by another, with
    blockOwnerDeletion, is created only by someone who may update that owner's finalizers."""
    owner = kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "owner", "namespace": "default"}})
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": "cm-writer", "namespace": "default"},
                 "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                            "verbs": ["create", "update"]}]})
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "cm-writer", "namespace": "default"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": "cm-writer"},
                 "subjects": [{"kind": "User", "name": "gina",
                               "apiGroup": "rbac.authorization.k8s.io"}]})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
           "uid": owner["metadata"]["uid"], "blockOwnerDeletion": True}

    def owned(name: str, **extra: bool) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "ownerReferences": [{**ref, **extra}]}})

    refused = kube.kubectl("--as=gina", "create", "-f", "-", input=owned("blocking"))
    assert refused.returncode != 0
    assert ("cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't "
            "set finalizers on") in refused.stderr
    plain = kube.kubectl("--as=gina", "create", "-f", "-",
                         input=owned("plain", blockOwnerDeletion=False))
    assert plain.returncode == 0, plain.stderr
    kube.patch("rbac.authorization.k8s.io/v1", "roles", "default", "cm-writer", {"rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "update"]},
        {"apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"]}]})
    allowed = kube.kubectl("--as=gina", "create", "-f", "-", input=owned("blocking"))
    assert allowed.returncode == 0, allowed.stderr
