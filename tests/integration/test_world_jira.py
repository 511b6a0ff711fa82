"""The Jira Cloud stand-in over plain HTTP: create, labels, JQL with lag, transitions, comments."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentsaga_lab.world import ManualClock, World


def adf(text: str) -> dict[str, Any]:
    return {"type": "doc", "version": 1,
            "content": [{"type": "paragraph", "content": [{"type": "text", "text": text}]}]}


@pytest.fixture
def jira(world: World) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{world.url}/rest/api/3", auth=("bot@example.com", "token"),
                      timeout=5) as http:
        yield http


def create(jira: httpx.Client, labels: list[str], summary: str = "Refund order 1182") -> Any:
    response = jira.post("/issue", json={"fields": {
        "project": {"key": "SUP"}, "summary": summary, "issuetype": {"name": "Task"},
        "labels": labels, "description": adf("Customer asked for a refund."),
    }})
    assert response.status_code == 201, response.text
    return response.json()


def test_create_returns_a_key_and_get_is_consistent(world: World, jira: httpx.Client) -> None:
    created = create(jira, ["saga-k1"])
    assert created["key"] == "SUP-4470"
    assert created["self"].endswith(f"/rest/api/3/issue/{created['id']}")
    issue = jira.get(f"/issue/{created['key']}").json()
    assert issue["fields"]["labels"] == ["saga-k1"]
    assert issue["fields"]["status"]["statusCategory"]["key"] == "indeterminate"
    assert jira.get(f"/issue/{created['id']}").json()["key"] == "SUP-4470"
    assert jira.get("/issue/SUP-1").status_code == 404
    [ticket] = world.truth()["tickets"]
    assert (ticket["system"], ticket["key"], ticket["state"]) == ("jira", "SUP-4470", "open")


def test_jql_by_label_sees_new_issues_only_after_the_lag(
    world: World, clock: ManualClock, jira: httpx.Client
) -> None:
    world.set_search_lag(0.3)
    created = create(jira, ["saga-k2"])
    create(jira, ["saga-other"])

    def search() -> list[Any]:
        body = jira.get("/search/jql", params={"jql": 'labels = "saga-k2"',
                                               "fields": "summary,labels"}).json()
        issues: list[Any] = body["issues"]
        return issues

    assert search() == []
    clock.advance(0.29)
    assert search() == []
    clock.advance(0.01)
    issues = search()
    assert [i["key"] for i in issues] == [created["key"]]
    assert issues[0]["fields"] == {"summary": "Refund order 1182", "labels": ["saga-k2"]}
    both = jira.post("/search/jql", json={"jql": 'labels in ("saga-k2", saga-other)'}).json()
    assert len(both["issues"]) == 2 and both["isLast"] is True


def test_reconcile_issues_reads_through_the_lag(world: World, jira: httpx.Client) -> None:
    world.set_search_lag(60)
    created = create(jira, ["saga-k3"])
    body = jira.post("/search/jql", json={"jql": "labels = saga-k3",
                                          "reconcileIssues": [int(created["id"])]}).json()
    assert [i["key"] for i in body["issues"]] == [created["key"]]


def test_draft_issue_opens_then_closes_with_a_comment(world: World, jira: httpx.Client) -> None:
    created = create(jira, ["saga-k4", "draft"])
    key = created["key"]
    names = {t["name"]: t["id"] for t in jira.get(f"/issue/{key}/transitions").json()
             ["transitions"]}
    assert names == {"Open": "11", "Done": "31"}
    assert jira.post(f"/issue/{key}/transitions",
                     json={"transition": {"id": "11"}}).status_code == 204
    assert world.truth()["tickets"][0]["status"] == "Open"
    comment = jira.post(f"/issue/{key}/comment", json={"body": adf("Rolled back by saga.")})
    assert comment.status_code == 201
    done = next(t for t in jira.get(f"/issue/{key}/transitions").json()["transitions"]
                if t["to"]["statusCategory"]["key"] == "done")
    assert jira.post(f"/issue/{key}/transitions",
                     json={"transition": {"id": done["id"]}}).status_code == 204
    again = jira.post(f"/issue/{key}/transitions", json={"transition": {"id": "31"}})
    assert again.status_code == 400
    assert again.json()["errorMessages"] == ["Transition id '31' is not valid for this issue."]
    [ticket] = world.truth()["tickets"]
    assert (ticket["status"], ticket["state"]) == ("Done", "closed")
    assert ticket["comments"] == [{"body": "Rolled back by saga.", "public": True}]


def test_invalid_requests_get_jira_error_collections(world: World, jira: httpx.Client) -> None:
    spaced = jira.post("/issue", json={"fields": {
        "project": {"key": "SUP"}, "summary": "x", "issuetype": {"name": "Task"},
        "labels": ["has space"]}})
    assert spaced.status_code == 400
    assert spaced.json() == {"errorMessages": [], "errors": {
        "labels": "The label 'has space' contains spaces which is invalid."}}
    plain = jira.post("/issue", json={"fields": {
        "project": {"key": "SUP"}, "summary": "x", "issuetype": {"name": "Task"},
        "description": "plain text"}})
    assert "Atlassian Document" in plain.json()["errors"]["description"]
    assert jira.get("/search/jql", params={"jql": ""}).status_code == 400
    assert jira.get("/search/jql", params={"jql": "colour = red"}).status_code == 400
    assert jira.get("/search", params={"jql": "labels = x"}).status_code == 410
    assert world.truth()["tickets"] == []
