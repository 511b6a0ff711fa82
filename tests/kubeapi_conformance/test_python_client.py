"""The stand-in against the real `kubernetes` Python client: pods, eviction, status, watch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch

from sagatest.kube_fixtures import Kube


@pytest.fixture
def core(kube: Kube) -> Iterator[client.CoreV1Api]:
    api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kube.kubeconfig))
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()


def _pod(name: str) -> Any:
    """A plain dict: the client serialises dicts as it does its models (its annotations name
    only the models)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"agentsaga.io/run": "run1"}},
            "spec": {"containers": [{"name": "agent", "image": "example/agent:1"}]}}


def _body(obj: dict[str, Any]) -> Any:
    return obj


def test_eviction_sets_disruption_target_and_deletes_the_pod(
        kube: Kube, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", _pod("agent-0"))
    kube.graceful_pod_deletion()  # no kubelet: the pod stays, terminating, until removed

    core.create_namespaced_pod_eviction(
        "agent-0", "default",
        client.V1Eviction(metadata=client.V1ObjectMeta(name="agent-0", namespace="default")))

    pod = kube.get("v1", "pods", "default", "agent-0")
    assert pod is not None
    assert pod["metadata"]["deletionTimestamp"]
    disruption = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert disruption == [{"type": "DisruptionTarget", "status": "True",
                           "reason": "EvictionByEvictionAPI",
                           "message": "Eviction API: evicting",
                           "lastTransitionTime": disruption[0]["lastTransitionTime"]}]

    kube.remove_now("v1", "pods", "default", "agent-0")
    assert kube.get("v1", "pods", "default", "agent-0") is None


def test_eviction_blocked_by_a_disruption_budget_is_429(
        kube: Kube, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", _pod("agent-0"))
    kube.block_evictions()
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod_eviction(
            "agent-0", "default", client.V1Eviction(metadata=client.V1ObjectMeta(name="agent-0")))
    assert raised.value.status == 429
    pod = kube.get("v1", "pods", "default", "agent-0")
    assert pod is not None and "deletionTimestamp" not in pod["metadata"]


def test_strategic_status_patch_merges_pod_conditions_by_type(
        kube: Kube, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", _pod("agent-0"))
    ready = {"type": "Ready", "status": "True"}
    core.patch_namespaced_pod_status("agent-0", "default",
                                     {"status": {"phase": "Running", "conditions": [ready]}})
    core.patch_namespaced_pod_status("agent-0", "default", {"status": {"conditions": [
        {"type": "PodScheduled", "status": "True"}]}})
    pod = kube.get("v1", "pods", "default", "agent-0")
    assert pod is not None
    assert pod["status"]["phase"] == "Running"
    assert [c["type"] for c in pod["status"]["conditions"]] == ["Ready", "PodScheduled"]
    assert pod["metadata"]["generation"] == 1


def test_list_with_selectors_and_a_watch_stream(kube: Kube, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", _pod("agent-0"))
    other = _pod("agent-1")
    other["metadata"] = {"name": "agent-1", "labels": {"agentsaga.io/run": "run2"}}
    core.create_namespaced_pod("default", other)

    by_label = core.list_namespaced_pod("default", label_selector="agentsaga.io/run=run2")
    assert [p.metadata and p.metadata.name for p in by_label.items] == ["agent-1"]
    by_name = core.list_pod_for_all_namespaces(field_selector="metadata.name=agent-0")
    assert [p.metadata and p.metadata.name for p in by_name.items] == ["agent-0"]
    by_phase = core.list_namespaced_pod("default", field_selector="status.phase=Running")
    assert by_phase.items == []

    seen = [(e["type"], e["object"].metadata.name) for e in watch.Watch().stream(  # type: ignore[no-untyped-call]
        core.list_namespaced_pod, "default", timeout_seconds=1)]
    assert seen == [("ADDED", "agent-0"), ("ADDED", "agent-1")]


def test_conflicting_update_is_409_and_duplicate_create_is_409(
        kube: Kube, core: client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map(
        "default", _body({"metadata": {"name": "c"}, "data": {"a": "1"}}))
    with pytest.raises(client.ApiException) as duplicate:
        core.create_namespaced_config_map("default", _body({"metadata": {"name": "c"}}))
    assert duplicate.value.status == 409
    assert '"reason":"AlreadyExists"' in str(duplicate.value.body).replace(" ", "")

    core.patch_namespaced_config_map("c", "default", {"data": {"a": "2"}})
    created.data = {"a": "3"}
    with pytest.raises(client.ApiException) as stale:
        core.replace_namespaced_config_map("c", "default", created)
    assert stale.value.status == 409
    stored = kube.get("v1", "configmaps", "default", "c")
    assert stored is not None and stored["data"] == {"a": "2"}
