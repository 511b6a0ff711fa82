"""Pure helpers of the stand-in: ages as kubectl prints them, selectors, patch documents."""

from __future__ import annotations

import pytest

from sagatest.kubeapi.patch import merge_patch, strategic_merge_patch
from sagatest.kubeapi.selectors import field_selector, json_path, label_selector
from sagatest.kubeapi.table import human_duration


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (59, "59s"), (119, "119s"), (120, "2m"), (185, "3m5s"), (600, "10m"),
    (3 * 3600, "3h"), (3 * 3600 + 120, "3h2m"), (9 * 3600, "9h"), (50 * 3600, "2d2h"),
    (10 * 86400, "10d"), (800 * 86400, "2y70d"),
])
def test_human_duration_matches_kubectl(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_label_selector_forms() -> None:
    obj = {"metadata": {"labels": {"app": "agentsaga", "tier": "sidecar"}}}
    assert label_selector("app=agentsaga,tier in (sidecar, agent)")(obj)
    assert label_selector("app,!missing")(obj)
    assert not label_selector("tier notin (sidecar)")(obj)
    assert not label_selector("app!=agentsaga")(obj)


def test_field_selector_and_json_path() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "status": {"phase": "Running",
           "conditions": [{"type": "Ready", "status": "True"}]}}
    assert field_selector("metadata.name=p,status.phase!=Failed")(pod)
    assert not field_selector("metadata.namespace==other")(pod)
    assert json_path(pod, '.status.conditions[?(@.type=="Ready")].status') == "True"
    assert json_path(pod, ".status.conditions[0].type") == "Ready"
    assert json_path(pod, ".status.missing.deeper") is None


def test_merge_and_strategic_merge() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {"a": {"c": 2,
                                                                                     "d": 3}}
    assert merge_patch({"l": [1, 2]}, {"l": [3]}) == {"l": [3]}
    old = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}
    new = strategic_merge_patch(old, {"spec": {"containers": [
        {"name": "b", "image": "2"}, {"name": "a", "$patch": "delete"}]}})
    assert new == {"spec": {"containers": [{"name": "b", "image": "2"}]}}
