"""Fault injection as the real clients see it (the stripe SDK, httpx), checked against the truth."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
import stripe

from agentsaga_lab.world import Fault, World
from sagatest.stripe_world import authorise, client
from sagatest.world_fixtures import poll_until

ISSUE = {"fields": {"project": {"key": "SUP"}, "summary": "Refund order 1182",
                    "issuetype": {"name": "Task"}, "labels": ["saga-k2"]}}


def test_commit_then_504_reaches_the_sdk_while_the_intent_exists(world: World) -> None:
    world.faults.add(Fault("POST", "/v1/payment_intents", "commit_then_504", on_call=1))
    sc = client(world)
    with pytest.raises(stripe.APIError) as caught:
        authorise(sc, "k-504")
    assert caught.value.http_status == 504
    [pi] = world.truth()["payment_intents"]
    assert pi["status"] == "requires_capture"
    assert authorise(sc, "k-504").id == pi["id"]  # the retry replays the committed outcome
    assert len(world.truth()["payment_intents"]) == 1


def test_commit_then_reset_is_a_connection_error_while_the_intent_exists(world: World) -> None:
    world.faults.add(Fault("POST", "/v1/payment_intents", "commit_then_reset", on_call=1))
    sc = client(world)
    with pytest.raises(stripe.APIConnectionError):
        authorise(sc, "k-reset")
    assert [p["metadata"]["saga_key"] for p in world.truth()["payment_intents"]] == ["k-reset"]


def test_dropped_response_times_the_client_out_after_commit(world: World) -> None:
    world.faults.add(Fault("POST", "/v1/payment_intents/*/capture", "drop_response"))
    sc = client(world)
    pi = authorise(sc, "k-drop")
    slow = client(world, timeout=0.3)
    with pytest.raises(stripe.APIConnectionError):
        slow.v1.payment_intents.capture(pi.id)
    assert world.truth()["payment_intents"][0]["status"] == "succeeded"


def test_reject_commits_nothing_and_answers_the_given_body(world: World) -> None:
    body = {"error": {"type": "invalid_request_error", "message": "nope", "code": "x_rejected"}}
    world.faults.add(Fault("POST", "/v1/payment_intents", "reject", times=1, status=400,
                           body=body))
    sc = client(world)
    with pytest.raises(stripe.InvalidRequestError) as caught:
        authorise(sc, "k-reject")
    assert caught.value.code == "x_rejected"
    assert world.truth()["payment_intents"] == []
    assert authorise(sc, "k-reject").status == "requires_capture"  # key was not consumed


def test_fail_before_commit_502_commits_nothing(world: World) -> None:
    world.faults.add(Fault("POST", "/rest/api/3/issue", "fail_before_commit_502"))
    with httpx.Client(base_url=world.url) as http:
        response = http.post("/rest/api/3/issue", json=ISSUE)
    assert response.status_code == 502
    assert world.truth()["tickets"] == []


def test_on_call_hits_only_the_nth_matching_call(world: World) -> None:
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=2))
    with httpx.Client(base_url=world.url) as http:
        codes = [http.post("/rest/api/3/issue", json=ISSUE).status_code for _ in range(3)]
    assert codes == [201, 504, 201]
    assert len(world.truth()["tickets"]) == 3  # the 504 one was committed too


def test_jira_reset_is_a_connection_error_for_httpx(world: World) -> None:
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_reset", on_call=1))
    with httpx.Client(base_url=world.url) as http, pytest.raises(httpx.TransportError):
        http.post("/rest/api/3/issue", json=ISSUE)
    [ticket] = world.truth()["tickets"]
    assert ticket["labels"] == ["saga-k2"]


def test_jira_dropped_response_is_a_read_timeout_for_httpx(world: World) -> None:
    world.faults.add(Fault("POST", "/rest/api/3/issue", "drop_response", seconds=5))
    with httpx.Client(base_url=world.url, timeout=0.3) as http, pytest.raises(
        httpx.ReadTimeout
    ):
        http.post("/rest/api/3/issue", json=ISSUE)
    # the client gave up at its own timeout, which may come before the world committed
    assert len(poll_until(lambda: world.truth()["tickets"])) == 1


def test_hold_keeps_the_call_before_its_commit_until_released(world: World) -> None:
    held = world.faults.add(Fault("POST", "/v1/payment_intents", "hold", on_call=1))
    sc = client(world)
    answers: list[Any] = []
    call = threading.Thread(target=lambda: answers.append(authorise(sc, "k-held")))
    call.start()
    poll_until(lambda: world.truth()["calls"].get("POST /v1/payment_intents"))
    assert world.truth()["payment_intents"] == [] and answers == []  # held, not committed
    held.release()
    call.join(timeout=30)
    [pi] = world.truth()["payment_intents"]
    assert [a.id for a in answers] == [pi["id"]] and pi["status"] == "requires_capture"


def test_delay_answers_late_but_normally(world: World) -> None:
    world.faults.add(Fault("GET", "/warehouse/reships", "delay", seconds=0.2))
    with httpx.Client(base_url=world.url, timeout=0.1) as http, pytest.raises(
        httpx.ReadTimeout
    ):
        http.get("/warehouse/reships")
    with httpx.Client(base_url=world.url, timeout=2) as http:
        assert http.get("/warehouse/reships").json() == {"reships": []}


def test_fault_needs_a_known_kind() -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault("POST", "/v1/x", "explode")  # type: ignore[arg-type]


def test_a_500_is_saved_under_the_key_and_replayed(world: World) -> None:
    world.faults.add(Fault("POST", "/v1/payment_intents", "fail_500_cached", on_call=1))
    sc = client(world)
    for _ in range(2):
        with pytest.raises(stripe.APIError) as caught:
            authorise(sc, "k-500")
        assert caught.value.http_status == 500
    assert caught.value.headers is not None
    assert caught.value.headers.get("Idempotent-Replayed") == "true"
    assert world.truth()["payment_intents"] == []
    assert authorise(sc, "k-500-new").status == "requires_capture"
