"""Chaos campaigns: seeded fault injection over real sidecars, Jobs, Postgres and the world,
checked against the world's ground truth (`agentsaga chaos`)."""

from agentsaga.chaos.campaign import Campaign, CampaignConfig, CampaignResult
from agentsaga.chaos.faults import FAULT_KINDS
from agentsaga.chaos.invariants import Answer, Violation, check

__all__ = ["FAULT_KINDS", "Answer", "Campaign", "CampaignConfig", "CampaignResult", "Violation",
           "check"]
