"""Chaos campaigns: seeded fault injection over real sidecars, Jobs, Postgres and the world,
checked against the world's ground truth (`agentsaga chaos`)."""

from agentsaga_lab.chaos.campaign import Campaign, CampaignConfig, CampaignResult
from agentsaga_lab.chaos.faults import FAULT_KINDS
from agentsaga_lab.chaos.invariants import Answer, Violation, check

__all__ = ["FAULT_KINDS", "Answer", "Campaign", "CampaignConfig", "CampaignResult", "Violation",
           "check"]
