"""The world's control plane over HTTP (faults, truth, reset, config), the warehouse, the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import httpx
import pytest

from agentsaga_lab.world import World


def test_faults_are_added_listed_and_cleared_over_http(world: World) -> None:
    with httpx.Client(base_url=world.url, timeout=5) as http:
        added = http.post("/_world/faults", json={
            "method": "POST", "path": "/warehouse/reships", "kind": "reject", "on_call": 1,
            "status": 503, "body": {"error": "busy"}})
        assert added.status_code == 201
        assert http.post("/_world/faults", json={"method": "POST", "path": "/x",
                                                 "kind": "nope"}).status_code == 400
        refused = http.post("/warehouse/reships", json={"order_id": "1182"})
        assert (refused.status_code, refused.json()) == (503, {"error": "busy"})
        [listed] = http.get("/_world/faults").json()
        assert (listed["seen"], listed["fired"]) == (1, 1)
        assert http.delete("/_world/faults").status_code == 200
        assert http.get("/_world/faults").json() == []
        assert http.post("/warehouse/reships", json={"order_id": "1182"}).status_code == 201
        truth = http.get("/_world/truth").json()
    assert [r["status"] for r in truth["reships"]] == ["accepted"]  # the rejected call never ran
    assert truth["calls"]["POST /warehouse/reships"] == 2


RESHIPS = {"method": "POST", "path": "/warehouse/reships"}


@pytest.mark.parametrize(("body", "says"), [
    ("{not json", "the fault is not valid JSON"),
    ("[1, 2]", "a fault is a JSON object with the fields method, path, kind"),
    ('"reject"', "a fault is a JSON object"),
    ("null", "a fault is a JSON object"),
    ({"path": "/warehouse/reships", "kind": "reject"}, "missing fault fields: ['method']"),
    ({**RESHIPS, "method": 5, "kind": "reject"}, "fault method 5: an HTTP method"),
    ({**RESHIPS, "path": 7, "kind": "reject"}, "fault path 7: a path starting with '/'"),
    ({**RESHIPS, "kind": ["reject"]}, "unknown fault kind ['reject']"),
    ({**RESHIPS, "kind": "reject", "times": "2"}, "fault times '2': a whole number of at least 1"),
    ({**RESHIPS, "kind": "reject", "on_call": 0}, "fault on_call 0: a whole number of at least 1"),
    ({**RESHIPS, "kind": "reject", "on_call": True}, "fault on_call True"),
    ({**RESHIPS, "kind": "reject", "on_call": 1, "times": 1}, "give on_call or times, not both"),
    ({**RESHIPS, "kind": "delay", "seconds": "soon"}, "fault seconds 'soon': a finite number"),
    ({**RESHIPS, "kind": "delay", "seconds": -1}, "fault seconds -1"),
    ({**RESHIPS, "kind": "reject", "status": "teapot"}, "fault status 'teapot': an HTTP error"),
    ({**RESHIPS, "kind": "reject", "status": 1000}, "fault status 1000: an HTTP error status, "
                                                    "400 to 599"),
    ({**RESHIPS, "kind": "delay", "status": 503},
     "a delay fault does not use status: status is for reject"),
    ({**RESHIPS, "kind": "commit_then_504", "seconds": 5, "body": {}},
     "a commit_then_504 fault does not use body, seconds"),
])
def test_a_bad_fault_is_a_400_saying_what_is_wrong_and_adds_nothing(
        world: World, body: object, says: str) -> None:
    with httpx.Client(base_url=world.url, timeout=5) as http:
        kept = http.post("/_world/faults", json={**RESHIPS, "kind": "reject", "times": 1,
                                                 "status": 409})
        assert kept.status_code == 201
        text = body if isinstance(body, str) else json.dumps(body)
        refused = http.post("/_world/faults", content=text,
                            headers={"content-type": "application/json"})
        assert refused.status_code == 400, refused.text
        assert says in refused.json()["error"], refused.json()
        assert [f["status"] for f in http.get("/_world/faults").json()] == [409]
        # the world still serves, with only the fault that was added
        assert http.post("/warehouse/reships", json={"order_id": "1"}).status_code == 409
        assert http.post("/warehouse/reships", json={"order_id": "2"}).status_code == 201


def test_config_and_reset_over_http(world: World) -> None:
    with httpx.Client(base_url=world.url, timeout=5) as http:
        config = http.post("/_world/config", json={"search_lag": 1.5, "search_rate": 5,
                                                   "reject_reships": True}).json()
        assert {k: config[k] for k in ("search_lag", "search_rate", "reject_reships")} == {
            "search_lag": 1.5, "search_rate": 5.0, "reject_reships": True}
        assert config["stripe_search"] is True and config["jira_projects"] == ["SUP"]
        assert world.config.search_lag == 1.5
        rejected = http.post("/warehouse/reships", json={"order_id": "1182"})
        assert rejected.status_code == 422
        assert rejected.json()["error"] == "reship_rejected"
        assert http.post("/_world/config", json={"colour": 1}).status_code == 400
        assert http.post("/_world/reset").status_code == 200
        truth = http.get("/_world/truth").json()
    assert truth["reships"] == [] and truth["calls"] == {}
    assert world.warehouse.rejecting is False


def test_account_knobs_and_the_exchange_log_over_http(world: World) -> None:
    with httpx.Client(base_url=world.url, timeout=5) as http:
        changed = http.post("/_world/config", json={"jira_done_transition": False,
                                                    "jira_projects": ["SUP", "OPS"]}).json()
        assert changed["jira_done_transition"] is False and changed["jira_projects"] == [
            "SUP", "OPS"]
        assert world.accounts.jira_projects == ("SUP", "OPS")
        wrong = http.post("/_world/config", json={"search_lag": 3, "stripe_search": "no"})
        assert wrong.status_code == 400 and "stripe_search must be true or false" in wrong.text
        assert world.accounts.stripe_search is True and world.config.search_lag == 0.0
        assert http.get("/rest/api/3/project/OPS/statuses").status_code == 200
        [exchange] = http.get("/_world/exchanges").json()
        assert (exchange["method"], exchange["path"], exchange["status"]) == (
            "GET", "/rest/api/3/project/OPS/statuses", 200)
        assert "Done" not in exchange["response_body"]
        http.post("/_world/reset")
        assert http.get("/_world/exchanges").json() == []


def test_warehouse_rejections_are_in_the_truth(world: World) -> None:
    world.warehouse.reject_reships(True)
    with httpx.Client(base_url=world.url, timeout=5) as http:
        assert http.post("/warehouse/reships", json={"order_id": "1"}).status_code == 422
        world.warehouse.reject_reships(False)
        accepted = http.post("/warehouse/reships", json={"order_id": "2"}).json()
        assert http.get(f"/warehouse/reships/{accepted['id']}").json()["order_id"] == "2"
        assert http.get("/warehouse/reships", params={"order_id": "1"}).json() == {"reships": []}
    assert [(r["order_id"], r["status"]) for r in world.truth()["reships"]] == [
        ("1", "rejected"), ("2", "accepted")]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_agentsaga_world_command_serves_until_interrupted(inherited: str) -> None:
    """Ctrl-C stops it, also when it was started with SIGINT ignored (as a background job of a
    shell without job control is)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsaga.cli", "world", "--port", "0", "--smtp-port", "0",
         "--search-lag", "0"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=_ignore_sigint if inherited == "ignored" else None,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.search(r"serving on (http://127\.0\.0\.1:\d+)", first)
        assert match, first
        with httpx.Client(base_url=match.group(1), timeout=5) as http:
            assert http.get("/_world/truth").json()["payment_intents"] == []
            assert http.get("/_world/config").json()["search_lag"] == 0.0
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
