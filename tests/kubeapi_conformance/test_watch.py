"""Watch semantics over raw HTTP: replay from a resourceVersion, 410, bookmarks, watch-list."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from sagatest.kube_fixtures import Kube
from sagatest.kubeapi.auth import ADMIN_TOKEN
from sagatest.kubeapi.tls import client_context

CM = "/api/v1/namespaces/default/configmaps"


def _watch(kube: Kube, path: str, query: str) -> list[dict[str, Any]]:
    """Read a whole watch stream (the server closes it at timeoutSeconds)."""
    request = urllib.request.Request(f"{kube.url}{path}?watch=true&{query}",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(request, timeout=15, context=client_context()) as response:
        assert response.headers["Content-Type"] == "application/json"
        return [json.loads(line) for line in response.read().splitlines() if line.strip()]


def _watch_until(kube: Kube, path: str, query: str, type_: str) -> list[dict[str, Any]]:
    """Read a watch stream up to its first event of `type_` (the stream's own timeoutSeconds
    is the deadline), and close it."""
    request = urllib.request.Request(f"{kube.url}{path}?watch=true&{query}",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    events: list[dict[str, Any]] = []
    with urllib.request.urlopen(request, timeout=60, context=client_context()) as response:
        for line in response:
            if line.strip():
                events.append(json.loads(line))
                if events[-1]["type"] == type_:
                    break
    return events


def _get(kube: Kube, path: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{kube.url}{path}",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(request, timeout=5, context=client_context()) as response:
        body: dict[str, Any] = json.loads(response.read())
        return body


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "data": {"v": "1"}}


def test_watch_replays_events_after_a_resource_version(kube: Kube) -> None:
    first = kube.create(_cm("a"))
    start_rv = first["metadata"]["resourceVersion"]
    second = kube.create(_cm("b"))
    patched = kube.patch("v1", "configmaps", "default", "a", {"data": {"v": "2"}})
    deleted = kube.delete("v1", "configmaps", "default", "b")

    events = _watch(kube, CM, f"resourceVersion={start_rv}&timeoutSeconds=1")
    assert [(e["type"], e["object"]["metadata"]["name"], e["object"]["metadata"][
        "resourceVersion"]) for e in events] == [
        ("ADDED", "b", second["metadata"]["resourceVersion"]),
        ("MODIFIED", "a", patched["metadata"]["resourceVersion"]),
        ("DELETED", "b", deleted["metadata"]["resourceVersion"]),
    ]
    assert events[1]["object"]["data"] == {"v": "2"}
    assert events[0]["object"]["kind"] == "ConfigMap"


def test_watch_without_resource_version_starts_with_synthetic_added(kube: Kube) -> None:
    kube.create(_cm("a", team="x"))
    kube.create(_cm("b", team="y"))
    events = _watch(kube, CM, "timeoutSeconds=1&labelSelector=team%3Dx")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]


def test_watch_from_a_compacted_resource_version_gets_410_in_stream(kube: Kube) -> None:
    old_rv = kube.create(_cm("a"))["metadata"]["resourceVersion"]
    kube.create(_cm("b"))
    kube.compact()
    events = _watch(kube, CM, f"resourceVersion={old_rv}&timeoutSeconds=5")
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["kind"] == "Status"
    assert events[0]["object"]["code"] == 410
    assert events[0]["object"]["reason"] == "Expired"

    current = _get(kube, CM)["metadata"]["resourceVersion"]
    assert _watch(kube, CM, f"resourceVersion={current}&timeoutSeconds=1") == []


def test_watch_list_sends_initial_events_then_the_end_bookmark(kube: Kube) -> None:
    kube.create(_cm("a"))
    kube.create(_cm("b"))
    events = _watch(kube, CM, "sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                              "&allowWatchBookmarks=true&fieldSelector=metadata.name%3Db"
                              "&timeoutSeconds=1")
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[0]["object"]["metadata"]["name"] == "b"
    bookmark = events[1]["object"]
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(bookmark["metadata"]["resourceVersion"]) == kube.resource_version


def test_idle_watch_with_bookmarks_allowed_gets_periodic_bookmarks(kube: Kube) -> None:
    rv = kube.create(_cm("a"))["metadata"]["resourceVersion"]
    # the stream's deadline is far past the bookmark interval (2 s): read until the bookmark
    events = _watch_until(kube, CM, f"resourceVersion={rv}&allowWatchBookmarks=true"
                                    "&timeoutSeconds=30", "BOOKMARK")
    assert [e["type"] for e in events] == ["BOOKMARK"], "no bookmark before the stream ended"
    assert all(e["object"]["metadata"]["resourceVersion"] == rv for e in events)


def test_no_op_patch_neither_bumps_the_version_nor_emits(kube: Kube) -> None:
    created = kube.create(_cm("a"))
    same = kube.patch("v1", "configmaps", "default", "a", {"data": {"v": "1"}})
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    events = _watch(kube, CM, f"resourceVersion={created['metadata']['resourceVersion']}"
                              "&timeoutSeconds=1")
    assert events == []
