"""The control plane the end-to-end tests run against is real Kubernetes: kube-apiserver 1.37
that authenticates client certificates and TokenRequest tokens and authorizes with RBAC, the
controller-manager's Job controller and garbage collector, the scheduler, and kubectl and helm
talking to it as to any cluster."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sagatest.cluster import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / "tools" / "bin" / "kubectl"
HELM = ROOT / "tools" / "bin" / "helm"

T = TypeVar("T")


def _api(kubeconfig: Path) -> Any:
    return config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig))


def _whoami(api: Any) -> client.V1UserInfo:
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview())
    assert review.status is not None and review.status.user_info is not None, review
    return review.status.user_info


@pytest.fixture
def admin(control_plane: ControlPlane) -> Iterator[Any]:
    api = _api(control_plane.admin_kubeconfig)
    yield api
    api.close()


def _eventually(probe: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    """The probe's first truthy answer; RBAC, controllers and the scheduler all act through
    informers, a moment after the write that triggers them."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def _namespace(admin: Any, prefix: str) -> str:
    """A fresh namespace, once its `default` ServiceAccount exists (Pods are admitted only
    then: the ServiceAccount admission plugin is on, as in a cluster)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(admin)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def has_default_account() -> bool:
        try:
            core.read_namespaced_service_account("default", name)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    _eventually(has_default_account, f"the default ServiceAccount in {name}")
    return name


def _refused(call: Callable[[], object]) -> ApiException:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value


def test_the_server_is_kubernetes_1_37(admin: Any) -> None:
    version = client.VersionApi(admin).get_code()
    assert version.git_version.startswith("v1.37."), version
    assert (version.major, version.minor) == ("1", "37")
    assert version.git_tree_state == "clean"


def test_a_user_certificate_without_a_role_is_refused(control_plane: ControlPlane) -> None:
    api = _api(control_plane.user_kubeconfig("mallory", ["agentsaga-testers"]))
    who = _whoami(api)
    assert who.username == "mallory"
    assert {"agentsaga-testers", "system:authenticated"} <= set(who.groups or [])

    refusal = _refused(lambda: client.CoreV1Api(api).list_namespaced_pod("default"))
    assert refusal.status == 403
    message = json.loads(refusal.body or "{}")["message"]
    assert 'User "mallory" cannot list resource "pods"' in message


def test_a_service_account_token_is_limited_by_rbac(control_plane: ControlPlane,
                                                    admin: Any) -> None:
    namespace = _namespace(admin, "sa-token")
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="worker")))
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="hello"), data={"greeting": "hi"}))
    rbac.create_namespaced_role(namespace, client.V1Role(
        metadata=client.V1ObjectMeta(name="read-configmaps"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"],
                                   verbs=["get", "list"])]))
    rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="worker-reads-configmaps"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                                  name="read-configmaps"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="worker",
                                       namespace=namespace)]))

    api = _api(control_plane.service_account_kubeconfig(namespace, "worker"))
    worker = client.CoreV1Api(api)
    assert _whoami(api).username == f"system:serviceaccount:{namespace}:worker"

    def read_greeting() -> str | None:
        try:
            data = worker.read_namespaced_config_map("hello", namespace).data
            return (data or {}).get("greeting")
        except ApiException as error:
            if error.status == 403:  # the binding is not in the authorizer's cache yet
                return None
            raise

    assert _eventually(read_greeting, "the RoleBinding to take effect") == "hi"
    assert _refused(lambda: worker.list_namespaced_secret(namespace)).status == 403
    assert _refused(lambda: worker.list_namespaced_config_map("default")).status == 403
    assert _refused(lambda: worker.delete_namespaced_config_map("hello", namespace)).status == 403


def test_the_job_controller_makes_the_pods_and_the_garbage_collector_removes_them(
        admin: Any) -> None:
    namespace = _namespace(admin, "job")
    core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)
    job = batch.create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name="probe"),
        spec=client.V1JobSpec(backoff_limit=0, template=client.V1PodTemplateSpec(
            spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(
                name="probe", image="busybox", command=["true"])])))))

    def job_pods() -> list[Any]:
        return list(core.list_namespaced_pod(
            namespace, label_selector="batch.kubernetes.io/job-name=probe").items)

    pod = _eventually(lambda: job_pods()[:1], "the Job controller to create a pod")[0]
    owner = pod.metadata.owner_references[0]
    assert job.metadata is not None
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Job", "probe",
                                                                     job.metadata.uid, True)
    assert "batch.kubernetes.io/job-tracking" in (pod.metadata.finalizers or [])

    def unschedulable() -> bool:
        status = core.read_namespaced_pod(pod.metadata.name, namespace).status
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable"
                   for c in (status.conditions if status else None) or [])

    # the scheduler runs, and no Node is registered
    _eventually(unschedulable, "the scheduler to find no node for the pod")

    batch.delete_namespaced_job("probe", namespace, propagation_policy="Background")
    _eventually(lambda: not job_pods(), "the garbage collector to delete the Job's pod")


def _require_binary(path: Path) -> None:
    """kubectl and helm come from `make tools` (`make test` runs it): without them, a failure
    that says so."""
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make tools` (`make test` installs it)")


def test_kubectl_and_helm_see_kubernetes_1_37(control_plane: ControlPlane, admin: Any,
                                               tmp_path: Path) -> None:
    _require_binary(KUBECTL)
    _require_binary(HELM)
    kubeconfig = str(control_plane.admin_kubeconfig)
    expected = client.VersionApi(admin).get_code().git_version

    versions = json.loads(subprocess.run(
        [str(KUBECTL), "--kubeconfig", kubeconfig, "version", "-o", "json"],
        capture_output=True, text=True, check=True, timeout=60).stdout)
    assert versions["serverVersion"]["gitVersion"] == expected

    env = {**os.environ, "KUBECONFIG": kubeconfig, "HELM_CACHE_HOME": str(tmp_path / "cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "config"), "HELM_DATA_HOME": str(tmp_path / "data")}
    namespace = _namespace(admin, "helm")

    def chart(name: str, kube_version: str) -> Path:
        folder = tmp_path / name
        (folder / "templates").mkdir(parents=True)
        (folder / "Chart.yaml").write_text(
            f"apiVersion: v2\nname: {name}\nversion: 0.1.0\nkubeVersion: '{kube_version}'\n")
        (folder / "templates" / "configmap.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"
            "data:\n  kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}\n")
        return folder

    def helm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(HELM), *args, "--namespace", namespace], env=env,
                              capture_output=True, text=True, check=False, timeout=120)

    installed = helm("install", "fits", str(chart("fits", ">= 1.37.0-0")))
    assert installed.returncode == 0, installed.stderr
    stored = client.CoreV1Api(admin).read_namespaced_config_map("fits", namespace)
    assert (stored.data or {}).get("kubeVersion") == expected

    refused = helm("install", "too-new", str(chart("too-new", "< 1.37.0-0")))
    assert refused.returncode != 0
    assert "incompatible with Kubernetes" in refused.stderr, refused.stderr


def test_an_old_resource_version_expires_after_compaction(control_plane: ControlPlane,
                                                          admin: Any) -> None:
    namespace = _namespace(admin, "compaction")
    core = client.CoreV1Api(admin)
    created = core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="counter"), data={"n": "0"}))
    assert created.metadata is not None and created.metadata.resource_version is not None
    old = created.metadata.resource_version
    for n in range(1, 4):
        core.patch_namespaced_config_map("counter", namespace, {"data": {"n": str(n)}})
    assert control_plane.compact() > int(old)

    def expired() -> bool:
        try:
            core.list_namespaced_config_map(namespace, resource_version=old,
                                            resource_version_match="Exact")
        except ApiException as error:
            if error.status == 410:
                return True
            raise
        return False  # still served from the watch cache's own snapshot

    _eventually(expired, "410 Gone for a list at a compacted resourceVersion", timeout=60)


def test_the_api_server_restarts_with_its_state(control_plane: ControlPlane, admin: Any) -> None:
    namespace = _namespace(admin, "restart")
    client.CoreV1Api(admin).create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="kept"), data={"before": "restart"}))
    control_plane.restart_apiserver()
    kept = client.CoreV1Api(admin).read_namespaced_config_map("kept", namespace)
    assert kept.data == {"before": "restart"}
