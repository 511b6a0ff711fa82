"""Jira, Zendesk, email, warehouse and generic HTTP connectors over real HTTP against the world."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsaga.connectors.config import (
    EmailConfig,
    HttpSettings,
    JiraConfig,
    WarehouseConfig,
    ZendeskConfig,
)
from agentsaga.connectors.email import EmailConnector
from agentsaga.connectors.http import register_file
from agentsaga.connectors.jira import JiraTickets
from agentsaga.connectors.warehouse import WarehouseConnector
from agentsaga.connectors.zendesk import ZendeskTickets
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga.saga.registry import Registry, as_effect
from agentsaga_lab.world import Fault, ManualClock, World

HTTP = HttpSettings(timeout_s=2.0, search_rate=1000.0)


def test_jira_504_after_create_is_unknown_and_the_label_finds_it(world: World) -> None:
    jira = JiraTickets(JiraConfig(world.url, "SUP"), HTTP)
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))
    with pytest.raises(OutcomeUnknown):
        jira.create("Refund for order 1182", "1182", "", "k1", draft=False)
    [ticket] = world.truth()["tickets"]
    assert "saga-k1" in ticket["labels"]
    found = jira.find_many(["k1", "k2"])
    assert list(found) == ["k1"] and found["k1"].ref == ticket["key"]


def test_jira_lagging_search_hides_a_new_ticket(world: World, clock: ManualClock) -> None:
    jira = JiraTickets(JiraConfig(world.url, "SUP"), HTTP)
    world.set_search_lag(0.5)
    jira.create("a", "1", "", "k1", draft=False)
    assert jira.find_many(["k1"]) == {}
    clock.advance(0.5)  # the index caught up
    assert "k1" in jira.find_many(["k1"])


def test_jira_draft_opens_and_close_twice_closes_once(world: World) -> None:
    jira = JiraTickets(JiraConfig(world.url, "SUP"), HTTP)
    draft = jira.create("a", "1", "", "k1", draft=True)
    assert world.truth()["tickets"][0]["state"] == "draft"
    jira.open(str(draft.ref), "k2")
    assert world.truth()["tickets"][0]["state"] == "open"
    jira.close(str(draft.ref), "k3", "rolled back")
    jira.close(str(draft.ref), "k3", "rolled back")
    [ticket] = world.truth()["tickets"]
    assert ticket["state"] == "closed" and len(ticket["comments"]) == 2  # opened, closed once
    with pytest.raises(Rejected):
        jira.close("SUP-9999", "k4", "ghost")


def test_zendesk_same_key_is_one_ticket_found_by_external_id(world: World) -> None:
    zendesk = ZendeskTickets(ZendeskConfig(world.url), HTTP)
    world.faults.add(Fault("POST", "/api/v2/tickets.json", "commit_then_reset", on_call=1))
    with pytest.raises(OutcomeUnknown):
        zendesk.create("Refund", "1182", "", "k1", draft=False)
    again = zendesk.create("Refund", "1182", "", "k1", draft=False)  # replayed under the key
    [ticket] = world.truth()["tickets"]
    assert again.ref == str(ticket["id"]) and zendesk.find_many(["k1"])["k1"].ref == again.ref
    zendesk.close(str(again.ref), "c1", "rolled back")
    zendesk.close(str(again.ref), "c1", "rolled back")
    [ticket] = world.truth()["tickets"]
    assert ticket["state"] == "closed" and len(ticket["comments"]) == 2


def test_email_send_unknown_then_found_by_header_and_draft_delete_is_idempotent(
        world: World) -> None:
    email = EmailConnector(EmailConfig(world.url, "support@shop.example"), HTTP)
    world.faults.add(Fault("POST", "/emails", "commit_then_504", on_call=1))
    with pytest.raises(OutcomeUnknown):
        email.send(["dana@example.com"], "Hello", "Body", "k1")
    [sent] = world.truth()["emails"]
    assert sent["headers"]["X-Saga-Key"] == "k1"
    assert email.find_many(["k1"])["k1"].ref == sent["id"]
    draft = email.create_draft("dana@example.com", "Draft", "Body", "k2")
    email.delete_draft(str(draft.ref), "c2")
    email.delete_draft(str(draft.ref), "c2")
    assert world.truth()["drafts"][0]["deleted"] is True


def test_warehouse_rejection_is_rejected_and_accepted_reship_is_found(world: World) -> None:
    warehouse = WarehouseConnector(WarehouseConfig(world.url), HTTP)
    world.warehouse.reject_reships(True)
    with pytest.raises(Rejected):
        warehouse.reship("1182", ["sku"], "lost", "k1")
    world.warehouse.reject_reships(False)
    made = warehouse.reship("1182", ["sku"], "lost", "k2")
    assert warehouse.find_many(["k1", "k2"]) == {"k2": made}


def test_cancelling_a_reship_twice_cancels_it_once(world: World) -> None:
    warehouse = WarehouseConnector(WarehouseConfig(world.url), HTTP)
    made = warehouse.reship("1182", ["sku"], "lost", "k1")
    first = warehouse.cancel(str(made.ref), "c1")
    again = warehouse.cancel(str(made.ref), "c1")
    assert first.result["status"] == again.result["status"] == "cancelled"
    assert [r["status"] for r in world.truth()["reships"]] == ["cancelled"]


def test_generic_http_tool_carries_the_key_and_looks_it_up(world: World, tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(f"""
tools:
  - name: open_support_case
    class: compensatable
    audience: [support_team]
    method: POST
    url: {world.url}/api/v2/tickets.json
    key_field: ticket.external_id
    id_field: ticket.id
    lookup:
      url: {world.url}/api/v2/tickets.json?external_id={{key}}
      items: tickets
      id_field: id
    compensate: {{tool: solve_case, args: {{id: $ref}}}}
  - name: solve_case
    class: irreversible
    method: PUT
    url: {world.url}/api/v2/tickets/{{id}}.json
""")
    registry = Registry()
    assert register_file(registry, str(config), HTTP, {}) == ["open_support_case", "solve_case"]
    spec = registry.get("open_support_case")
    args = {"ticket": {"subject": "Refund", "comment": {"body": "order 1182"}}}
    effect = as_effect(spec.fn(**args, idempotency_key="k1"))
    [ticket] = world.truth()["tickets"]
    assert effect is not None and effect.ref == str(ticket["id"])
    assert ticket["external_id"] == "k1" and ticket["idempotency_key"] == "k1"
    assert spec.lookup is not None
    found = as_effect(spec.lookup("k1"))
    assert found is not None and found.ref == effect.ref
    assert spec.lookup("nope") is None
    comp = spec.build_compensation(args, "k1")
    assert comp is not None and comp.tool == "solve_case" and comp.args == {"id": {"$ref": "k1"}}


def test_generic_http_tool_percent_encodes_the_model_arguments_in_its_path(
        world: World, tmp_path: Path) -> None:
    """A model's `1/../2` reaches no ticket: refused before any request (it cannot be one path
    segment)."""
    config = tmp_path / "tools.yaml"
    config.write_text(f"""
tools:
  - name: open_case
    class: irreversible
    method: POST
    url: {world.url}/api/v2/tickets.json
    id_field: ticket.id
  - name: solve_case
    class: irreversible
    method: PUT
    url: {world.url}/api/v2/tickets/{{id}}.json
""")
    registry = Registry()
    register_file(registry, str(config), HTTP, {})
    opened = [as_effect(registry.get("open_case").fn(
        ticket={"subject": f"case {n}", "comment": {"body": "x"}}, idempotency_key=f"k{n}"))
        for n in (1, 2)]
    first, second = (str(e.ref) for e in opened if e is not None)
    seen = len(world.exchanges())
    with pytest.raises(Rejected, match="cannot name an object in a URL path"):
        registry.get("solve_case").fn(id=f"{second}/../{first}",
                                      ticket={"status": "solved"}, idempotency_key="k3")
    assert {t["status"] for t in world.truth()["tickets"]} == {"new"}
    assert world.exchanges()[seen:] == []
