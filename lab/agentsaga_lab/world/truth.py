"""The ground truth: what the stand-ins hold, as one JSON-ready dict.

    {
      "payment_intents": [{id, status, amount, currency, customer, amount_capturable,
                           amount_received, amount_refunded, metadata, idempotency_keys, created}],
      "refunds":         [Stripe refund objects + "idempotency_key"],
      "tickets":         [{system: "jira", id, key, project, status (Draft|Open|Done),
                           state (draft|open|closed), labels, summary, resolution,
                           comments: [{body, public}]},
                          {system: "zendesk", id, external_id, status, state (open|closed),
                           tags, subject, idempotency_key, comments: [{body, public}]}],
      "emails":          [{id, via ("api"|"smtp"), from, to, cc, bcc, subject, text, html,
                           headers, tags, idempotency_key, created_at, message_id (smtp)}],
      "drafts":          [{id, to, subject, headers, deleted, sent_email_id}],
      "reships":         [{id, order_id, items, reason, idempotency_key,
                           status ("accepted"|"rejected")}],
      "calls":           {"POST /v1/payment_intents": 2, ...}   # per method + route pattern
    }
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentsaga_lab.world.email import EmailStandIn
    from agentsaga_lab.world.jira import JiraStandIn
    from agentsaga_lab.world.stripe import StripeStandIn
    from agentsaga_lab.world.warehouse import Warehouse
    from agentsaga_lab.world.zendesk import ZendeskStandIn


def ground_truth(
    *,
    stripe: StripeStandIn,
    jira: JiraStandIn,
    zendesk: ZendeskStandIn,
    email: EmailStandIn,
    warehouse: Warehouse,
    calls: Counter[str],
) -> dict[str, Any]:
    """A deep copy of every stand-in's state (safe to keep while the world goes on)."""
    emails, drafts = email.truth()
    truth: dict[str, Any] = {
        **stripe.truth(),
        "tickets": jira.truth() + zendesk.truth(),
        "emails": emails,
        "drafts": drafts,
        "reships": warehouse.truth(),
        "calls": dict(calls),
    }
    copied: dict[str, Any] = json.loads(json.dumps(truth))
    return copied
