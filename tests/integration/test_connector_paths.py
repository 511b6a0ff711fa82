"""Every connector puts ids and arguments into its URLs as one encoded path segment: a `?`, a
`#`, a `%` or a space never changes the path the vendor receives (asserted on the raw path each
stand-in received, and on its ground truth: no other object changed). An id that cannot be one
segment (empty, `.`, `..`, holding a `/`) is refused before any request, saying why: the
stand-in receives nothing and nothing changes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentsaga.connectors.config import (
    EmailConfig,
    HttpSettings,
    JiraConfig,
    StripeConfig,
    WarehouseConfig,
    ZendeskConfig,
)
from agentsaga.connectors.email import EmailConnector
from agentsaga.connectors.http import register_file
from agentsaga.connectors.jira import JiraTickets
from agentsaga.connectors.stripe import StripeConnector
from agentsaga.connectors.warehouse import WarehouseConnector
from agentsaga.connectors.zendesk import ZendeskTickets
from agentsaga.errors import Rejected, SagaError
from agentsaga.saga.registry import Registry, as_effect
from agentsaga_lab.world import World

HTTP = HttpSettings(timeout_s=2.0, search_rate=1000.0)
HOSTILE = {
    "x?y#z": "x%3Fy%23z",
    "50%": "50%25",
    "SUP 1": "SUP%201",
    "...": "...",
}
REFUSED = ["", " ", ".", "..", "../SUP-1", "SUP-1/../SUP-2", "a/b", "a\\b"]
"""Ids no URL path can carry as one segment."""


def received(world: World, call: Callable[[str], object], before: str, after: str = "") -> None:
    """`call(hostile)` for each hostile id: every request the vendor received for it has the
    path `before` + the id as one encoded segment, then `after` or a further segment of the
    connector's own (`/transitions`) or nothing."""
    for hostile, encoded in HOSTILE.items():
        seen = len(world.exchanges())
        # refused by the vendor (no such object): what matters is where it went
        with contextlib.suppress(SagaError):
            call(hostile)
        paths = {e.raw_path for e in world.exchanges()[seen:]}
        assert paths, f"no request for {hostile!r}"
        prefix = f"{before}{encoded}"
        assert all(p.startswith(prefix) and p[len(prefix):] in ("", after, "/transitions")
                   for p in paths), (hostile, paths)


def test_jira_encodes_the_ticket_in_every_path(world: World) -> None:
    jira = JiraTickets(JiraConfig(world.url, "SUP"), HTTP)
    jira.create("a", "1", "", "k1", draft=True)
    before = world.truth()["tickets"]
    received(world, lambda t: jira.close(t, "k2", "x"), "/rest/api/3/issue/")
    received(world, lambda t: jira.open(t, "k3"), "/rest/api/3/issue/")
    received(world, lambda t: jira.delete(t, "k4"), "/rest/api/3/issue/")
    assert world.truth()["tickets"] == before


def test_zendesk_encodes_the_ticket_in_every_path(world: World) -> None:
    zendesk = ZendeskTickets(ZendeskConfig(world.url), HTTP)
    zendesk.create("a", "1", "", "k1", draft=False)
    before = world.truth()["tickets"]
    received(world, lambda t: zendesk.close(t, "k2", "x"), "/api/v2/tickets/", ".json")
    received(world, lambda t: zendesk.open(t, "k3"), "/api/v2/tickets/", ".json")
    assert world.truth()["tickets"] == before


def test_email_and_warehouse_encode_their_ids(world: World) -> None:
    email = EmailConnector(EmailConfig(world.url, "support@shop.example"), HTTP)
    email.create_draft("dana@example.com", "Draft", "Body", "k1")
    drafts = world.truth()["drafts"]
    received(world, lambda d: email.delete_draft(d, "c1"), "/drafts/")
    assert world.truth()["drafts"] == drafts
    warehouse = WarehouseConnector(WarehouseConfig(world.url), HTTP)
    warehouse.reship("1182", ["sku"], "lost", "k2")
    reships = world.truth()["reships"]
    received(world, lambda r: warehouse.cancel(r, "c2"), "/warehouse/reships/", "/cancel")
    assert world.truth()["reships"] == reships


def _move_issue_tool(world: World, tmp_path: Path) -> Any:
    """A generic HTTP tool from a tools file whose URL has a field: Jira's transitions."""
    config = tmp_path / "tools.yaml"
    config.write_text(f"""
tools:
  - name: move_issue
    class: irreversible
    method: POST
    url: {world.url}/rest/api/3/issue/{{id}}/transitions
""")
    registry = Registry()
    register_file(registry, str(config), HTTP, {})
    return registry.get("move_issue").fn


def test_a_generic_http_tool_encodes_its_url_fields(world: World, tmp_path: Path) -> None:
    jira = JiraTickets(JiraConfig(world.url, "SUP"), HTTP)
    made = as_effect(jira.create("a", "1", "", "k1", draft=True))
    assert made is not None
    move = _move_issue_tool(world, tmp_path)
    before = world.truth()["tickets"]
    received(world, lambda i: move(id=i, transition={"id": "21"}, idempotency_key="k2"),
             "/rest/api/3/issue/", "/transitions")
    assert world.truth()["tickets"] == before


@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_the_segment_helper_round_trips(hostile: str) -> None:
    from urllib.parse import unquote

    from agentsaga.connectors.paths import segment

    assert "/" not in segment(hostile) and segment(hostile) not in (".", "..")
    assert unquote(segment(hostile)) == hostile


def refused(world: World, call: Callable[[str], object]) -> None:
    """`call(bad)` for each id of REFUSED: Rejected (the step is FAILED: nothing happened),
    saying which id and why, and the stand-in received no request at all."""
    for bad in REFUSED:
        seen = len(world.exchanges())
        with pytest.raises(Rejected) as caught:
            call(bad)
        said = str(caught.value)
        assert f"{bad!r} cannot name an object in a URL path" in said, said
        assert "Nothing was sent" in said
        assert world.exchanges()[seen:] == [], (bad, world.exchanges()[seen:])


def test_jira_refuses_an_id_that_is_not_one_segment(world: World) -> None:
    jira = JiraTickets(JiraConfig(world.url, "SUP"), HTTP)
    jira.create("a", "1", "", "k1", draft=True)
    before = world.truth()["tickets"]
    refused(world, lambda t: jira.close(t, "k2", "x"))
    refused(world, lambda t: jira.open(t, "k3"))
    refused(world, lambda t: jira.delete(t, "k4"))
    assert world.truth()["tickets"] == before


def test_zendesk_refuses_an_id_that_is_not_one_segment(world: World) -> None:
    zendesk = ZendeskTickets(ZendeskConfig(world.url), HTTP)
    zendesk.create("a", "1", "", "k1", draft=False)
    before = world.truth()["tickets"]
    refused(world, lambda t: zendesk.close(t, "k2", "x"))
    refused(world, lambda t: zendesk.open(t, "k3"))
    assert world.truth()["tickets"] == before


def test_email_refuses_an_id_that_is_not_one_segment(world: World) -> None:
    email = EmailConnector(EmailConfig(world.url, "support@shop.example"), HTTP)
    email.create_draft("dana@example.com", "Draft", "Body", "k1")
    drafts = world.truth()["drafts"]
    refused(world, lambda d: email.delete_draft(d, "c1"))
    assert world.truth()["drafts"] == drafts


def test_warehouse_refuses_an_id_that_is_not_one_segment(world: World) -> None:
    warehouse = WarehouseConnector(WarehouseConfig(world.url), HTTP)
    warehouse.reship("1182", ["sku"], "lost", "k2")
    reships = world.truth()["reships"]
    refused(world, lambda r: warehouse.cancel(r, "c2"))
    assert world.truth()["reships"] == reships


def test_a_generic_http_tool_refuses_a_url_field_that_is_not_one_segment(
        world: World, tmp_path: Path) -> None:
    move = _move_issue_tool(world, tmp_path)
    before = world.truth()["tickets"]
    refused(world, lambda i: move(id=i, transition={"id": "21"}, idempotency_key="k2"))
    assert world.truth()["tickets"] == before


def test_stripe_refuses_an_id_that_is_not_one_segment(world: World) -> None:
    """The SDK puts ids into its paths itself (`/v1/payment_intents/{id}/capture`): an empty
    one would capture nothing and list instead, `..` would climb to another endpoint."""
    stripe = StripeConnector(StripeConfig("sk_test_x", world.url), HTTP)
    before = world.truth()
    refused(world, lambda p: stripe.capture_payment(p, "k1"))
    refused(world, lambda p: stripe.cancel_or_refund_payment("k2", payment=p))
    assert world.truth() == before
