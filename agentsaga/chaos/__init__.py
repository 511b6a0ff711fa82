"""Chaos campaigns: seeded fault injection over real sidecars, Jobs, Postgres and the world,
checked against the world's ground truth (`agentsaga chaos`)."""

from agentsaga.extras import require

require("demo", "aiohttp", "aiosmtpd", "pgserver", what="the chaos runner")

from agentsaga.chaos.campaign import Campaign, CampaignConfig, CampaignResult  # noqa: E402
from agentsaga.chaos.faults import FAULT_KINDS  # noqa: E402
from agentsaga.chaos.invariants import Answer, Violation, check  # noqa: E402

__all__ = ["FAULT_KINDS", "Answer", "Campaign", "CampaignConfig", "CampaignResult", "Violation",
           "check"]
