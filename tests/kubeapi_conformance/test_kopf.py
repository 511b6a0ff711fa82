"""The stand-in against real kopf 1.45 (in-process KopfRunner) and real kubectl."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf.testing import KopfRunner

from sagatest.kube_fixtures import Kube
from sagatest.kubeapi import RequestRecord

AR = "agentsaga.io/v1alpha1"
FINALIZER = "agentsaga.io/test-finalizer"

OPERATOR = '''
import kopf

GVR = ("agentsaga.io", "v1alpha1", "agentruns")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.watching.server_timeout = 1
    settings.watching.client_timeout = 10
    settings.networking.error_backoffs = (0.1, 0.2, 0.5)
    settings.execution.default_backoff = 0.5
    settings.persistence.finalizer = "<FINALIZER>"
    # kopf waits this long for a watch event echoing each PATCH's resourceVersion before it
    # carries on regardless: far past the test's deadlines, so that only the stand-in's echo
    # lets the handlers proceed in time
    settings.persistence.consistency_timeout = 600


@kopf.on.login(id="login")
def login(**kwargs):
    # The client library reads $KUBECONFIG at import time; kopf's own parser reads it now.
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.create(*GVR, id="start")
def start(patch, **_):
    patch.status["phase"] = "Running"
    patch.status["pivot"] = {"state": "AwaitingApproval", "planHash": "h1"}


@kopf.on.field(*GVR, field="status.approval", id="approval")
def approval(new, status, patch, **_):
    if new and new.get("planHash") == status.get("pivot", {}).get("planHash"):
        patch.status["phase"] = "Committing"
        patch.status["pivot"] = {"state": new["decision"], "decidedBy": new["approver"]}


@kopf.on.delete(*GVR, id="cleanup")
def cleanup(**_):
    pass
'''.replace("<FINALIZER>", FINALIZER)


WATCH_PATH = "/apis/agentsaga.io/v1alpha1/agentruns"


def _wait_for_request(kube: Kube, matches: Callable[[RequestRecord], bool], after: int = 0,
                      timeout: float = 20.0) -> None:
    """Poll the stand-in's request log until a request matching `matches` arrived."""
    deadline = time.monotonic() + timeout
    while not any(matches(r) for r in kube.requests[after:]):
        assert time.monotonic() < deadline, "the expected request never came"
        time.sleep(0.02)


def _status(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("status") or {}


def test_kopf_operator_adds_finalizer_patches_status_and_reacts_to_approval(
        kube_with_crds: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kube = kube_with_crds
    operator = tmp_path / "operator.py"
    operator.write_text(OPERATOR)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    run = {"apiVersion": AR, "kind": "AgentRun",
           "metadata": {"name": "run1", "namespace": "default"}, "spec": {"agent": "refunder"}}

    # A registry of its own: handlers that other tests imported into kopf's default registry
    # (agentsaga.operator) must not run here.
    with KopfRunner(["run", "-A", "--standalone", str(operator)], timeout=60,
                    registry=kopf.OperatorRegistry()) as runner:
        _wait_for_request(kube, lambda r: r.path == WATCH_PATH and "watch=true" in r.query)
        kube.create(run)
        created = kube.wait_for(AR, "agentruns", "default", "run1", lambda o: (
            _status(o).get("phase") == "Running"
            and FINALIZER in (o or {})["metadata"].get("finalizers", [])), timeout=20)
        assert created is not None  # within the deadline: the stand-in echoed the PATCHes

        approve = kube.kubectl(
            "patch", "agentrun", "run1", "--subresource=status", "--type=merge", "-p",
            '{"status":{"approval":{"planHash":"h1","decision":"Approved","approver":"alice"}}}')
        assert approve.returncode == 0, approve.stderr
        decided = kube.wait_for(AR, "agentruns", "default", "run1",
                                lambda o: _status(o).get("phase") == "Committing", timeout=20)
        assert _status(decided)["pivot"] == {"state": "Approved", "decidedBy": "alice",
                                             "planHash": "h1"}

        deleted = kube.kubectl("delete", "agentrun", "run1", "--timeout=20s")
        assert deleted.returncode == 0, deleted.stderr
        assert kube.get(AR, "agentruns", "default", "run1") is None

        # History lost: kopf's next re-watch gets 410 in the stream, re-lists and carries on.
        seen = len(kube.requests)
        kube.compact()
        _wait_for_request(kube, lambda r: r.path == WATCH_PATH and "watch" not in r.query,
                          after=seen)
        kube.create({**run, "metadata": {"name": "run2", "namespace": "default"}})
        kube.wait_for(AR, "agentruns", "default", "run2",
                      lambda o: _status(o).get("phase") == "Running", timeout=20)

    assert runner.exception is None, runner.output
    assert runner.exit_code == 0, runner.output
    patches = [(r.path, r.content_type) for r in kube.requests if r.method == "PATCH"]
    assert ("/apis/agentsaga.io/v1alpha1/namespaces/default/agentruns/run1/status",
            "application/merge-patch+json") in patches
    assert ("/apis/agentsaga.io/v1alpha1/namespaces/default/agentruns/run1",
            "application/json-patch+json") in patches
