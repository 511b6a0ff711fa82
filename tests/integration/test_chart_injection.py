"""Sidecar injection with the chart's own sidecar template: the JSON patch of `sidecar_patch` (and
of the kopf handler) applied to a pod from an AdmissionReview gives a valid pod with the native
sidecar, and a second pass changes nothing."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import jsonpatch
import kopf
import kubernetes_validate
import pytest
import yaml

from agentsaga.operator.injection import (
    INJECT_LABEL,
    SIDECAR_NAME,
    TEMPLATE_ENV,
    inject_sidecar,
    load_template,
    sidecar_patch,
)
from sagatest.chart_tools import CHART, EXAMPLE_VALUES, FULL_VALUES, render, sidecar_template


def admission_review(pod: dict[str, Any]) -> dict[str, Any]:
    """An AdmissionReview as the apiserver sends it when a ReplicaSet creates a pod."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7d1e0c1a-6a52-4b8e-9d7b-0f4b7f1e2a11",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "support-agents",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
        },
    }


def example_pod() -> dict[str, Any]:
    deployment = yaml.safe_load((CHART / "examples" / "agent-deployment.yaml").read_text())
    template = deployment["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "generateName": "refund-agent-6d9c8b7f5-",
            "namespace": "support-agents",
        },
        "spec": copy.deepcopy(template["spec"]),
    }


@pytest.fixture(scope="module", params=["example", "full"])
def template(request: pytest.FixtureRequest) -> dict[str, Any]:
    values = {"example": EXAMPLE_VALUES, "full": FULL_VALUES}[request.param]
    return sidecar_template(render("-f", str(values)))


def test_patched_pod_validates_and_has_the_native_sidecar(template: dict[str, Any]) -> None:
    review = admission_review(example_pod())
    pod = review["request"]["object"]
    ops = sidecar_patch(pod, template)
    patched = jsonpatch.apply_patch(pod, ops)
    kubernetes_validate.validate(patched, "1.37.0", strict=True)

    (sidecar,) = patched["spec"]["initContainers"]
    assert sidecar["name"] == SIDECAR_NAME
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["args"] == ["sidecar"]
    env = {e["name"]: e for e in sidecar["env"]}
    for name, field in (
        ("AGENTSAGA_POD_NAME", "metadata.name"),
        ("AGENTSAGA_POD_NAMESPACE", "metadata.namespace"),
        ("AGENTSAGA_POD_UID", "metadata.uid"),
    ):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == field
    # the database credential comes from a Secret: the DSN's, or (postgres.credentials.location)
    # the namespace's own user and password beside the location
    credential = env["PGPASSWORD"] if "PGPASSWORD" in env else env["AGENTSAGA_DSN"]
    assert "secretKeyRef" in credential["valueFrom"]
    assert "AGENTSAGA_TOOLS" in env and "OTEL_SERVICE_NAME" in env
    # no Kubernetes credentials in the pod (the sidecar has no Kubernetes client at all); the
    # pod's identity comes from the downward API
    assert env["AGENTSAGA_POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert patched["spec"]["automountServiceAccountToken"] is False
    assert env["AGENTSAGA_LISTEN"]["value"].endswith(":50051") or "grpc" in sidecar["startupProbe"]
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert sidecar["startupProbe"] and sidecar["readinessProbe"] and sidecar["resources"]
    # every volume the sidecar mounts is in the pod; the app container is untouched
    mounted = {m["name"] for m in sidecar["volumeMounts"]}
    assert mounted <= {v["name"] for v in patched["spec"]["volumes"]}
    assert patched["spec"]["containers"] == pod["spec"]["containers"]
    # idempotent: a pod that has the sidecar gets no ops
    assert sidecar_patch(patched, template) == []


def test_a_pod_may_ask_for_its_service_account_token(template: dict[str, Any]) -> None:
    pod = example_pod()
    pod["metadata"]["annotations"] = {"agentsaga.io/service-account-token": "true"}
    patched = jsonpatch.apply_patch(pod, sidecar_patch(pod, template))
    assert "automountServiceAccountToken" not in patched["spec"]


def test_existing_init_containers_and_volumes_are_kept(template: dict[str, Any]) -> None:
    pod = example_pod()
    pod["spec"]["initContainers"] = [{"name": "migrate", "image": "example/migrate:1"}]
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    patched = jsonpatch.apply_patch(pod, sidecar_patch(pod, template))
    kubernetes_validate.validate(patched, "1.37.0", strict=True)
    assert [c["name"] for c in patched["spec"]["initContainers"]] == [SIDECAR_NAME, "migrate"]
    names = [v["name"] for v in patched["spec"]["volumes"]]
    assert names == ["scratch", *(v["name"] for v in template["volumes"])]


# kopf's decorator types the handler as its full callback protocol (every kwarg kopf passes);
# the tests call it with the ones it uses
handle = cast(Callable[..., None], inject_sidecar)


def raw(obj: dict[str, Any]) -> kopf.RawBody:
    return cast(kopf.RawBody, obj)


def test_kopf_handler_answers_with_the_same_patch(
    template: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sidecar.json"
    path.write_text(json.dumps(template))
    assert load_template(path) == template
    monkeypatch.setenv(TEMPLATE_ENV, str(path))
    pod = admission_review(example_pod())["request"]["object"]
    assert pod["metadata"]["labels"][INJECT_LABEL] == "true"

    patch = kopf.Patch(body=kopf.Body(raw(pod)))
    handle(body=kopf.Body(raw(pod)), patch=patch, logger=logging.getLogger("test"))
    via_kopf = jsonpatch.apply_patch(pod, patch.as_json_patch())
    direct = jsonpatch.apply_patch(pod, sidecar_patch(pod, template))
    assert via_kopf == direct

    again = kopf.Patch(body=kopf.Body(raw(via_kopf)))
    handle(body=kopf.Body(raw(via_kopf)), patch=again, logger=logging.getLogger("test"))
    assert again.as_json_patch() == []


def test_unusable_template_denies_instead_of_injecting_garbage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sidecar.json"
    path.write_text(json.dumps({"container": {"name": "other"}}))
    monkeypatch.setenv(TEMPLATE_ENV, str(path))
    pod = example_pod()
    with pytest.raises(kopf.AdmissionError, match="must be named 'agentsaga-sidecar'"):
        handle(
            body=kopf.Body(raw(pod)),
            patch=kopf.Patch(body=kopf.Body(raw(pod))),
            logger=logging.getLogger("test"),
        )
