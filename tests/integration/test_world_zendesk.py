"""The Zendesk stand-in over plain HTTP: idempotent create, external_id, search lag, solving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentsaga_lab.world import ManualClock, World


@pytest.fixture
def zendesk(world: World) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{world.url}/api/v2", auth=("agent@example.com/token", "t"),
                      timeout=5) as http:
        yield http


def ticket(external_id: str, subject: str = "Refund for order 1182") -> dict[str, Any]:
    return {"ticket": {"subject": subject, "external_id": external_id, "tags": ["saga"],
                       "comment": {"body": "Please refund order 1182."}}}


def test_create_with_idempotency_key_replays_and_refuses_other_payloads(
    world: World, zendesk: httpx.Client
) -> None:
    headers = {"Idempotency-Key": "k-zd"}
    first = zendesk.post("/tickets.json", json=ticket("saga-k-zd"), headers=headers)
    assert first.status_code == 201 and first.headers["x-idempotency-lookup"] == "miss"
    again = zendesk.post("/tickets.json", json=ticket("saga-k-zd"), headers=headers)
    assert again.headers["x-idempotency-lookup"] == "hit"
    assert again.json()["ticket"]["id"] == first.json()["ticket"]["id"]
    other = zendesk.post("/tickets.json", json=ticket("saga-k-zd", "other"), headers=headers)
    assert other.status_code == 400
    assert other.json()["error"] == "IdempotentRequestError"
    [truth] = world.truth()["tickets"]
    assert (truth["system"], truth["external_id"], truth["idempotency_key"]) == (
        "zendesk", "saga-k-zd", "k-zd")


def test_external_id_list_is_consistent_and_search_lags(
    world: World, clock: ManualClock, zendesk: httpx.Client
) -> None:
    world.set_search_lag(0.3)
    made = zendesk.post("/tickets", json=ticket("saga-k5")).json()["ticket"]
    listed = zendesk.get("/tickets.json", params={"external_id": "saga-k5"}).json()
    assert [t["id"] for t in listed["tickets"]] == [made["id"]]

    def search() -> list[Any]:
        found = zendesk.get("/search.json",
                            params={"query": "type:ticket external_id:saga-k5"}).json()
        results: list[Any] = found["results"]
        return results

    assert search() == []
    clock.advance(0.29)
    assert search() == []
    clock.advance(0.01)
    results = search()
    assert [r["id"] for r in results] == [made["id"]]


def test_solving_with_an_internal_note_closes_the_ticket(
    world: World, zendesk: httpx.Client
) -> None:
    made = zendesk.post("/tickets", json=ticket("saga-k6")).json()["ticket"]
    solved = zendesk.put(f"/tickets/{made['id']}.json", json={"ticket": {
        "status": "solved", "comment": {"body": "Opened by mistake; rolled back.",
                                        "public": False}}})
    assert solved.status_code == 200
    assert solved.json()["ticket"]["status"] == "solved"
    [truth] = world.truth()["tickets"]
    assert truth["state"] == "closed"
    assert truth["comments"][-1] == {"body": "Opened by mistake; rolled back.", "public": False}


def test_closed_tickets_refuse_updates(world: World, zendesk: httpx.Client) -> None:
    made = zendesk.post("/tickets", json=ticket("saga-k7")).json()["ticket"]
    zendesk.put(f"/tickets/{made['id']}", json={"ticket": {"status": "closed"}})
    refused = zendesk.put(f"/tickets/{made['id']}", json={"ticket": {"status": "open"}})
    assert refused.status_code == 422
    assert refused.json()["error"] == "RecordInvalid"
    assert zendesk.put(f"/tickets/{made['id']}",
                       json={"ticket": {"tags": ["x"]}}).status_code == 200
    assert world.truth()["tickets"][0]["status"] == "closed"
    assert zendesk.post("/tickets", json={"ticket": {"subject": "no body"}}).status_code == 422
