"""Connectors: tools for real systems (Stripe, Jira, Zendesk, email, a warehouse, any JSON API).

Each has execute (the key delivered natively where the API can take it and always as a findable
marker, R4), lookup by key (R7) and a compensation (R6). Endpoints and credentials come from
`AGENTSAGA_*` variables (`agentsaga.connectors.config`); `agentsaga.connectors.tools` registers
the standard tool set (`register_all(registry, env)`), and as a module it is the default set
for `agentsaga sidecar --tools agentsaga.connectors.tools`.
"""

from agentsaga.connectors.config import ConnectorConfig

__all__ = ["ConnectorConfig"]
