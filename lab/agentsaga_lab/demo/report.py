"""Outcomes from the world's ground truth, and the side-by-side table."""

from __future__ import annotations

from typing import Any

from agentsaga_lab.demo.world import CUSTOMER_EMAIL

METRICS = ("tickets_created", "tickets_open", "ghost_closes", "charges", "charges_unrefunded",
           "refunds", "customer_emails")
LABELS = {
    "tickets_created": "tickets created",
    "tickets_open": "tickets still open",
    "ghost_closes": "second closes of a closed ticket",
    "charges": "charges (PaymentIntents)",
    "charges_unrefunded": "charges neither refunded nor released",
    "refunds": "refunds + released authorisations",
    "customer_emails": "emails to the customer",
}
EXPECTED_AGENTSAGA = {"tickets_created": 1, "tickets_open": 0, "ghost_closes": 0, "charges": 1,
                      "charges_unrefunded": 0, "refunds": 1, "customer_emails": 0}
EXPECTED_NAIVE = {"tickets_created": 2, "tickets_open": 1, "ghost_closes": 1, "charges": 2,
                  "charges_unrefunded": 1, "refunds": 1, "customer_emails": 1}
TRANSITIONS = "POST /rest/api/3/issue/{key}/transitions"


def outcome(truth: dict[str, Any]) -> dict[str, int]:
    """The incident's numbers, from the stand-ins' state only."""
    tickets = [t for t in truth["tickets"] if t["system"] == "jira"]
    closed = [t for t in tickets if t["state"] == "closed"]
    intents = truth["payment_intents"]
    unrefunded = [pi for pi in intents if pi["status"] == "requires_capture" or (
        pi["status"] == "succeeded" and pi["amount_refunded"] < pi["amount_received"])]
    released = [pi for pi in intents if pi["status"] == "canceled"]
    return {
        "tickets_created": len(tickets),
        "tickets_open": len(tickets) - len(closed),
        "ghost_closes": max(0, truth["calls"].get(TRANSITIONS, 0) - len(closed)),
        "charges": len(intents),
        "charges_unrefunded": len(unrefunded),
        "refunds": len(truth["refunds"]) + len(released),
        "customer_emails": sum(1 for e in truth["emails"] if CUSTOMER_EMAIL in e["to"]),
    }


def table(left: dict[str, int], right: dict[str, int],
          titles: tuple[str, str] = ("naive", "agentsaga")) -> str:
    """The two outcomes side by side under `titles` (the naive harness's and agentsaga's by
    default)."""
    width = max(len(v) for v in LABELS.values())
    a, b = (max(len(t), 6) for t in titles)
    lines = [f"{'ground truth after the run':<{width}}  {titles[0]:>{a}}  {titles[1]:>{b}}",
             "-" * (width + a + b + 4)]
    for name in METRICS:
        lines.append(f"{LABELS[name]:<{width}}  {left[name]:>{a}}  {right[name]:>{b}}")
    return "\n".join(lines)


def log_table(steps: list[dict[str, Any]]) -> str:
    lines = [f"{'step':>4}  {'tool':<14} {'class':<13} {'status':<12} {'comp':<6} "
             f"{'audience':<14} external_ref"]
    for s in steps:
        lines.append(f"{s['step_idx']:>4}  {s['tool']:<14} {s['tool_class']:<13} "
                     f"{s['status']:<12} {s['comp_status'] or '-':<6} "
                     f"{','.join(s['audience']):<14} {s['external_ref'] or '-'}")
    return "\n".join(lines)
