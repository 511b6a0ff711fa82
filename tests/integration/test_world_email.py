"""The email stand-in: the Resend-like HTTP API with idempotency and drafts, and SMTP capture."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import httpx
import pytest

from agentsaga_lab.world import ManualClock, World


@pytest.fixture
def mail(world: World) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=world.url, headers={"Authorization": "Bearer re_test"},
                      timeout=5) as http:
        yield http


def message(subject: str = "Your refund", key: str = "k-mail") -> dict[str, Any]:
    return {"from": "support@shop.example", "to": ["ann@example.com"], "subject": subject,
            "text": "We refunded order 1182.", "headers": {"X-Saga-Key": key}}


def test_send_with_idempotency_key_is_sent_once(world: World, mail: httpx.Client) -> None:
    headers = {"Idempotency-Key": "k-mail"}
    first = mail.post("/emails", json=message(), headers=headers)
    again = mail.post("/emails", json=message(), headers=headers)
    assert first.status_code == again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    other = mail.post("/emails", json=message("Another subject"), headers=headers)
    assert other.status_code == 409
    assert other.json()["name"] == "invalid_idempotent_request"
    [sent] = world.truth()["emails"]
    assert (sent["via"], sent["to"], sent["idempotency_key"]) == ("api", ["ann@example.com"],
                                                                  "k-mail")
    assert sent["headers"] == {"X-Saga-Key": "k-mail"}
    assert mail.get(f"/emails/{sent['id']}").json()["subject"] == "Your refund"


def test_the_list_of_sent_emails_lags_like_a_search_index(
    world: World, clock: ManualClock, mail: httpx.Client
) -> None:
    world.set_search_lag(0.3)
    sent = mail.post("/emails", json=message(key="k-find")).json()

    def lookup() -> list[Any]:
        rows: list[Any] = mail.get("/emails", params={"limit": 100}).json()["data"]
        return rows

    assert lookup() == []
    clock.advance(0.29)
    assert lookup() == []
    clock.advance(0.01)
    rows = lookup()
    assert [r["id"] for r in rows] == [sent["id"]]


def test_a_deleted_draft_never_sends_and_a_sent_one_does(
    world: World, mail: httpx.Client
) -> None:
    dropped = mail.post("/drafts", json=message("draft one")).json()["id"]
    kept = mail.post("/drafts", json=message("draft two")).json()["id"]
    assert mail.delete(f"/drafts/{dropped}").json() == {"id": dropped, "object": "draft",
                                                         "deleted": True}
    assert mail.get(f"/drafts/{dropped}").status_code == 404
    sent_id = mail.post(f"/drafts/{kept}/send").json()["id"]
    assert mail.post(f"/drafts/{kept}/send").json()["id"] == sent_id
    truth = world.truth()
    assert [e["subject"] for e in truth["emails"]] == ["draft two"]
    assert {d["id"]: d["deleted"] for d in truth["drafts"]} == {dropped: True, kept: False}


def test_invalid_email_is_refused_and_not_recorded(world: World, mail: httpx.Client) -> None:
    response = mail.post("/emails", json={"from": "a@b.example", "to": "c@d.example"})
    assert response.status_code == 422
    assert world.truth()["emails"] == []


def test_smtp_messages_are_recorded_with_their_headers(world: World) -> None:
    msg = EmailMessage()
    msg["From"] = "support@shop.example"
    msg["To"] = "ann@example.com"
    msg["Subject"] = "Correction: your refund"
    msg["Message-ID"] = "<saga.run1.3.email@shop.example>"
    msg["X-Saga-Idempotency-Key"] = "k-smtp"
    msg.set_content("We wrote too soon.")
    with smtplib.SMTP("127.0.0.1", world.smtp_port, timeout=5) as smtp:
        smtp.login("user", "secret")
        smtp.send_message(msg)
    [sent] = world.truth()["emails"]
    assert sent["via"] == "smtp"
    assert sent["to"] == ["ann@example.com"]
    assert sent["subject"] == "Correction: your refund"
    assert sent["message_id"] == "<saga.run1.3.email@shop.example>"
    assert sent["headers"]["X-Saga-Idempotency-Key"] == "k-smtp"
    assert sent["idempotency_key"] == "k-smtp"
    assert sent["text"].strip() == "We wrote too soon."
