"""The Jira, Zendesk and email stand-ins and their connectors held to the best public
descriptions available (tests/support/sagatest/contracts/): Atlassian's Jira Cloud platform
OpenAPI document,
Resend's OpenAPI document, and a description of Zendesk's ticket API written from its
documentation (docs/contracts.md says which is which). Every request the connectors send and
every answer, errors included, must be one the description allows; the stand-ins refuse what
the services refuse, and the connectors turn that into FAILED (Rejected) with the reason."""

from __future__ import annotations

import json

import httpx
import pytest

from agentsaga.connectors.config import EmailConfig, HttpSettings, JiraConfig, ZendeskConfig
from agentsaga.connectors.email import EmailConnector
from agentsaga.connectors.jira import JiraTickets
from agentsaga.connectors.zendesk import ZendeskTickets
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga_lab.world import Fault, World
from agentsaga_lab.world.exchanges import Exchange
from sagatest.contracts.openapi import Contract

HTTP = HttpSettings(timeout_s=5.0, search_rate=1000.0)
JIRA, ZENDESK, RESEND = Contract.load("jira"), Contract.load("zendesk"), Contract.load("resend")


def problems(contract: Contract, exchanges: list[Exchange]) -> list[str]:
    return [p for e in exchanges for p in contract.check(e)]


def under(world: World, prefix: str) -> list[Exchange]:
    return [e for e in world.exchanges() if e.path.startswith(prefix)]


def test_jira_connector_and_stand_in_keep_to_atlassians_description(world: World) -> None:
    jira = JiraTickets(JiraConfig(world.url, "SUP", "agent@shop.example", "token"), HTTP)
    draft = jira.create("Refund for order 1182", "1182", "", "k1", draft=True)
    jira.open(str(draft.ref), "k2")
    assert set(jira.find_many(["k1", "k-none"])) == {"k1"}
    jira.close(str(draft.ref), "k3", "Rolled back")
    jira.close(str(draft.ref), "k3", "Rolled back")  # already done: no transition sent
    other = jira.create("Second", "1183", "a\nb", "k4", draft=False)
    jira.delete(str(other.ref), "k5")
    jira.delete(str(other.ref), "k5")  # already gone: 404, a success for the compensation
    with pytest.raises(Rejected, match="contains spaces"):
        jira.create("Bad", "1", "", "with space", draft=False)
    bad_project = JiraTickets(JiraConfig(world.url, "NOPE", "agent@shop.example", "t"), HTTP)
    with pytest.raises(Rejected, match="valid project"):
        bad_project.create("x", "1", "", "k6", draft=False)
    exchanges = under(world, "/rest/api/3/")
    assert {e.status for e in exchanges} == {200, 201, 204, 400, 404}
    assert problems(JIRA, exchanges) == []
    assert [t["key"] for t in world.truth()["tickets"]] == [draft.ref]


def test_jira_refuses_labels_when_the_create_screen_has_none(world: World) -> None:
    world.accounts.jira_labels = False
    jira = JiraTickets(JiraConfig(world.url, "SUP", "agent@shop.example", "token"), HTTP)
    with pytest.raises(Rejected, match="Field 'labels' cannot be set"):
        jira.create("Refund", "1182", "", "k1", draft=False)
    assert problems(JIRA, under(world, "/rest/api/3/")) == []
    assert world.truth()["tickets"] == []


def test_zendesk_connector_and_stand_in_keep_to_the_documented_api(world: World) -> None:
    zendesk = ZendeskTickets(ZendeskConfig(world.url, "agent@shop.example", "token"), HTTP)
    ticket = zendesk.create("Refund for order 1182", "1182", "", "k1", draft=True)
    zendesk.open(str(ticket.ref), "k2")
    assert set(zendesk.find_many(["k1", "k-none"])) == {"k1"}
    zendesk.close(str(ticket.ref), "k3", "Rolled back")
    zendesk.close(str(ticket.ref), "k3", "Rolled back")
    too_long = {"subject": [{"description": "Subject: is too long", "error": "TooLong"}]}
    world.faults.add(Fault("POST", "/api/v2/tickets.json", "reject", status=422, body={
        "error": "RecordInvalid", "description": "Record validation errors",
        "details": too_long}))
    with pytest.raises(Rejected, match="RecordInvalid"):
        zendesk.create("x" * 300, "1", "", "k4", draft=False)
    exchanges = under(world, "/api/v2/")
    assert {e.status for e in exchanges} == {200, 201, 422}
    assert problems(ZENDESK, exchanges) == []


def test_email_connector_and_stand_in_keep_to_resends_description(world: World) -> None:
    email = EmailConnector(EmailConfig(world.url, "support@shop.example", "re_key"), HTTP)
    sent = email.send(["dana@example.com"], "Your refund", "It is on its way.", "k1")
    email.send("lee@example.com", "Hello", "Hi", "k2")
    found = email.find_many(["k1", "k-none"])
    assert set(found) == {"k1"} and found["k1"].ref == sent.ref
    with pytest.raises(Rejected, match="422"):
        email.send([], "No one", "x", "k3")
    exchanges = [e for e in under(world, "/emails") if e.status != 422]
    assert problems(RESEND, exchanges) == []
    # Resend's description documents no error bodies; the refusal keeps Resend's documented shape
    [refused] = [e for e in under(world, "/emails") if e.status == 422]
    assert set(json.loads(refused.response_body)) == {"statusCode", "name", "message"}


def test_email_lookup_pages_through_the_list_and_says_unknown_past_its_window(
        world: World) -> None:
    email = EmailConnector(EmailConfig(world.url, "support@shop.example", "re_key"), HTTP)
    email.send("dana@example.com", "First", "x", "k-old")
    with httpx.Client(base_url=world.url) as client:
        for i in range(250):
            client.post("/emails", json={"from": "a@shop.example", "to": "b@example.com",
                                         "subject": f"s{i}", "text": "x"})
    assert set(email.find_many(["k-old"])) == {"k-old"}  # on the third page
    lists = [e for e in under(world, "/emails") if e.method == "GET"]
    assert len(lists) == 3 and problems(RESEND, lists) == []
    with httpx.Client(base_url=world.url) as client:
        for i in range(800):
            client.post("/emails", json={"from": "a@shop.example", "to": "b@example.com",
                                         "subject": f"t{i}", "text": "x"})
    with pytest.raises(OutcomeUnknown, match="cannot tell whether"):
        email.find_many(["k-old"])
