"""The AgentRun CRD: structural, valid for Kubernetes 1.37, and its schema says what we mean.

The stand-in neither prunes nor validates, so the schema itself is checked here: against the
CustomResourceDefinition schema of Kubernetes 1.37, for the structural rules, and by validating
sample objects with the openAPIV3Schema.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from sagatest.kube_fixtures import CRDS

CRD_FILE = CRDS / "agentruns.agentsaga.io.yaml"


def _crd() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CRD_FILE.read_text())
    return doc


def _schema() -> dict[str, Any]:
    version = _crd()["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _nodes(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path or ".", schema)]
    for name, sub in (schema.get("properties") or {}).items():
        out += _nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out += _nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _nodes(schema["additionalProperties"], f"{path}{{}}")
    return out


def _run(**status: Any) -> dict[str, Any]:
    return {"apiVersion": "agentsaga.io/v1alpha1", "kind": "AgentRun",
            "metadata": {"name": "refund-1182"},
            "spec": {"agent": "refunder", "runId": "refund-1182", "onOrphan": "unwind",
                     "orphanGracePeriodSeconds": 60, "pivot": {"required": True},
                     "irreversibleBeforePivot": "refuse"},
            "status": status}


FULL_STATUS = {
    "phase": "AwaitingApproval",
    "observedGeneration": 1,
    "conditions": [{"type": "AwaitingApproval", "status": "True", "observedGeneration": 1,
                    "lastTransitionTime": "2026-12-02T15:00:00Z", "reason": "PlanStaged",
                    "message": "3 commit steps staged"}],
    "pod": {"name": "agent-0", "uid": "u-1", "namespace": "default"},
    "ownerEpoch": 2,
    "steps": {"total": 3, "intended": 0, "confirmed": 2, "failed": 0, "unknown": 1,
              "notExecuted": 0, "compensated": 0},
    "pivot": {"state": "AwaitingApproval", "planHash": "ab12", "stagedAt": "2026-12-02T15:00:00Z",
              "steps": [{"step": 0, "tool": "stripe.authorize", "class": "reversible",
                         "audience": ["agent", "finance"], "externalRef": "pi_1",
                         "args": {"amount": 1200, "nested": {"any": ["thing"]}}}],
              "commit": [{"step": 3, "tool": "stripe.capture", "class": "irreversible",
                          "audience": ["customer"], "args": {}}]},
    "approval": {"planHash": "ab12", "decision": "Approved", "approver": "alice", "reason": "ok"},
    "irreversibleBeforePivot": 0,
    "corrections": {"4": {"tool": "email.send", "audience": ["customer"], "template": "apology",
                          "recipients": ["c@example.com"], "state": "Proposed",
                          "approval": {"decision": "Approved", "approver": "bob"}}},
    "job": {"name": "agentsaga-unwind-refund-1182", "kind": "unwind", "state": "Running",
            "startedAt": "2026-12-02T15:10:00Z"},
    "orphanedAt": "2026-12-02T15:09:00Z",
    "orphanReason": "PodEvicted",
    "message": "waiting for approval",
    "kopf": {"progress": {"start": {"retries": 1}}},
}


def test_crd_is_valid_for_kubernetes_1_37() -> None:
    kubernetes_validate.validate(_crd(), "1.37.0", strict=True)


def test_schema_is_structural() -> None:
    for path, node in _nodes(_schema()):
        if node.get("x-kubernetes-preserve-unknown-fields") or node.get(
                "x-kubernetes-int-or-string"):
            continue
        assert node.get("type"), f"{path} has no type"
        for forbidden in ("allOf", "anyOf", "oneOf", "not"):
            assert forbidden not in node, f"{path} uses {forbidden}"
    metadata = _schema()["properties"]["metadata"]
    assert metadata == {"type": "object"}


def test_only_args_and_kopf_keep_unknown_fields() -> None:
    preserving = sorted(path for path, node in _nodes(_schema())
                        if node.get("x-kubernetes-preserve-unknown-fields"))
    assert preserving == [".status.kopf", ".status.pivot.commit[].args",
                          ".status.pivot.steps[].args"]


def test_names_subresources_and_printer_columns() -> None:
    spec = _crd()["spec"]
    assert spec["group"] == "agentsaga.io" and spec["scope"] == "Namespaced"
    assert spec["names"] == {"kind": "AgentRun", "listKind": "AgentRunList",
                             "plural": "agentruns", "singular": "agentrun",
                             "shortNames": ["ar"], "categories": ["agentsaga"]}
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    assert [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]] == [
        ("Phase", ".status.phase"), ("Steps", ".status.steps.total"),
        ("Unknown", ".status.steps.unknown"), ("Pivot", ".status.pivot.state"),
        ("Human", ".status.awaitingHuman"), ("Age", ".metadata.creationTimestamp")]


def test_conditions_are_a_map_list_keyed_by_type_and_run_id_is_immutable() -> None:
    status = _schema()["properties"]["status"]["properties"]
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    run_id = _schema()["properties"]["spec"]["properties"]["runId"]
    assert run_id["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "runId is immutable"}]


def test_full_sample_validates() -> None:
    jsonschema.Draft7Validator(_schema()).validate(_run(**FULL_STATUS))


@pytest.mark.parametrize("broken", [
    {"spec": {"agent": "a", "runId": "-starts-with-dash"}},
    {"spec": {"agent": "a", "onOrphan": "explode"}},
    {"spec": {"agent": "a", "orphanGracePeriodSeconds": -1}},
    {"spec": {"agent": "a", "irreversibleBeforePivot": "allow"}},
    {"spec": {"runId": "no-agent"}},
    {"status": {"phase": "Done"}},
    {"status": {"pivot": {"state": "Maybe"}}},
    {"status": {"approval": {"planHash": "x", "decision": "Yes"}}},
    {"status": {"conditions": [{"type": "Ready", "status": "Yes", "reason": "R", "message": "",
                                "lastTransitionTime": "2026-12-02T15:00:00Z"}]}},
    {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "not camel",
                                "message": "", "lastTransitionTime": "2026-12-02T15:00:00Z"}]}},
    {"status": {"corrections": {"1": {"state": "Lost"}}}},
    {"status": {"job": {"kind": "retry"}}},
])
def test_schema_rejects(broken: dict[str, Any]) -> None:
    obj = _run()
    obj.update(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_schema()).validate(obj)
