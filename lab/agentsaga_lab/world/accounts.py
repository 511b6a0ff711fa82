"""What each stand-in's account allows: the settings of a real account that a connector relies on
and that `agentsaga connectors check` looks for. The defaults are an account set up as the
connectors need it; turn a knob off to break it on purpose (`World.accounts`, or
`POST /_world/config` with the field names below).

    stripe_search         Stripe's Search API is available (it is not for merchants in India:
                          docs.stripe.com/search); off: search answers 400
    jira_projects         the Jira projects that exist
    jira_done_transition  the project's workflow has a status in the `done` category, reached
                          by a transition from the open statuses
    jira_labels           the `labels` field is on the project's create screen
    zendesk_token_access  API token access is enabled (Admin Center); off: 401
    zendesk_agent         the token's user is an agent (an end user cannot create tickets
                          through the agent API or list them by external_id)
    email_full_access     the email API key has full access; off: a sending-only key, which
                          the provider refuses (401 restricted_api_key) on every read
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass
class Accounts:
    stripe_search: bool = True
    jira_projects: tuple[str, ...] = ("SUP",)
    jira_done_transition: bool = True
    jira_labels: bool = True
    zendesk_token_access: bool = True
    zendesk_agent: bool = True
    email_full_access: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in fields(self)}

    def update(self, changes: dict[str, Any]) -> None:
        """Apply `POST /_world/config` fields that name a knob; refuse wrong types."""
        for f in fields(self):
            if f.name not in changes:
                continue
            value = changes[f.name]
            if f.name == "jira_projects":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError("jira_projects must be a list of project keys")
                setattr(self, f.name, tuple(value))
            elif isinstance(value, bool):
                setattr(self, f.name, value)
            else:
                raise ValueError(f"{f.name} must be true or false, not {value!r}")

    @classmethod
    def knobs(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))
