"""One framework run of the incident: stage it, let the agent run, unwind, read the truth."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from agentsaga.extras import require
from agentsaga_lab.demo.frameworks.stage import stage, unwind
from agentsaga_lab.demo.report import outcome

AGENTS = ("openai-agents", "langgraph")


@dataclass
class FrameworkResult:
    agent: str
    outcome: dict[str, int]
    calls: list[dict[str, Any]]
    final: str
    unwind: dict[str, Any]


def run_framework(agent: str, dsn: str | None = None) -> FrameworkResult:
    if agent == "openai-agents":
        require("openai-agents", "agents", what="`agentsaga demo --agent openai-agents`")
        from agentsaga_lab.demo.frameworks import openai as framework
    elif agent == "langgraph":
        require("langgraph", "langchain_core", "langgraph",
                what="`agentsaga demo --agent langgraph`")
        from agentsaga_lab.demo.frameworks import langgraph as framework  # type: ignore[no-redef]
    else:
        raise ValueError(f"--agent {agent!r}: use one of {', '.join(AGENTS)}")
    run_id = f"refund-1182-{uuid.uuid4().hex[:6]}"
    with stage(dsn) as scene:
        essay, final = framework.run(scene.grpc_address, scene.mcp_url, run_id)
        report = unwind(scene.grpc_address, run_id)
        truth = scene.world.truth()
    return FrameworkResult(agent, outcome(truth), essay.tool_calls(), final, report)
