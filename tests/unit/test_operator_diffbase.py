"""kopf's last-handled configuration, an annotation the operator writes on every AgentRun, holds
no card number or secret: for a handler of a status field (the approval, settlements,
corrections) kopf keeps that field in it, with the person's reason as written."""

from __future__ import annotations

import json

import kopf

from agentsaga.operator.kopf_settings import MaskedDiffBase
from sagatest.planted_secrets import leaks, planted_text

STATUS_FIELDS = ["status.approval", "status.settlements", "status.corrections"]


def body(reason: str) -> kopf.Body:
    return kopf.Body({
        "apiVersion": "agentsaga.io/v1alpha1", "kind": "AgentRun",
        "metadata": {"name": "refund-1182", "namespace": "default", "labels": {"team": "a"}},
        "spec": {"runId": "refund-1182"},
        "status": {
            "approval": {"planHash": "h1", "decision": "Approved", "approver": "alice",
                         "reason": reason},
            "settlements": {"0": {"outcome": "Happened", "settler": "bob", "reason": reason}},
            "corrections": {"1": {"decision": "Approved", "approver": "carol",
                                  "reason": reason}},
            "phase": "AwaitingApproval"}})


def test_the_stored_essence_of_status_fields_is_masked_and_still_diffs() -> None:
    storage = MaskedDiffBase(prefix="agentsaga.io", key="last-handled-configuration")
    essence = storage.build(body=body(planted_text()), extra_fields=STATUS_FIELDS)
    patch = kopf.Patch()
    storage.store(body=body(planted_text()), patch=patch, essence=essence)
    written = json.dumps(dict(patch), ensure_ascii=False)
    assert leaks(written) == []
    assert "[card ****4242]" in written  # masked, not dropped
    # what kopf diffs on is kept: the decision, the approver, the rest of the reason
    approval = essence["status"]["approval"]
    assert (approval["decision"], approval["approver"], approval["planHash"]) == (
        "Approved", "alice", "h1")
    assert essence["spec"] == {"runId": "refund-1182"}
    other = storage.build(body=body("plan reviewed"), extra_fields=STATUS_FIELDS)
    assert other != essence


def test_kopfs_own_storage_would_have_written_them() -> None:
    """The case the masking is for: kopf keeps a status field's values as they are."""
    plain = kopf.AnnotationsDiffBaseStorage(prefix="agentsaga.io",
                                            key="last-handled-configuration")
    essence = plain.build(body=body(planted_text()), extra_fields=STATUS_FIELDS)
    assert leaks(json.dumps(essence, ensure_ascii=False))
