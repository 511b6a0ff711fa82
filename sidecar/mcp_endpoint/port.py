"""What the MCP endpoint needs from the saga service, and nothing more.

The endpoint is written against this Protocol; `agentsaga.sidecar.mcp_endpoint.service`
satisfies it over the Dispatcher. Every decision (R1-R12) lives behind it: the endpoint
only translates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from agentsaga.dispatch import DispatchResult
from agentsaga.registry import JSON


@dataclass(frozen=True)
class ToolInfo:
    """A tool as a front end offers it: its name, class (R1), description and JSON Schema."""

    name: str
    tool_class: str
    description: str
    input_schema: JSON
    read_only: bool = False


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    owner_epoch: int
    adopted: bool


class SagaPort(Protocol):
    """The service methods a front end calls; each raises `agentsaga.errors` on bad input."""

    def begin_or_adopt(self, run_id: str, *, agent: str = "") -> RunStarted:
        """Begin the run, or adopt it if it exists (R12), as BeginRun does."""
        ...

    def is_begun_here(self, run_id: str) -> bool:
        """Whether this process already holds the run's epoch (no need to begin it again)."""
        ...

    def dispatch(self, run_id: str, tool: str, args: JSON) -> DispatchResult:
        """One tool call through the saga log: the run id, the rate limit and the arguments
        (size, NUL characters) are checked first; nothing is written for a refused call."""
        ...

    def reach_pivot(self, run_id: str, plan: list[JSON]) -> dict[str, Any]:
        """Stage the commit plan for one human approval (R10); the pivot record."""
        ...

    def await_decision(self, run_id: str, timeout_s: float) -> dict[str, Any]:
        """The pivot record once decided, or as it stands after `timeout_s`."""
        ...

    def end_run(self, run_id: str, outcome: str) -> str:
        """End the run as `Succeeded` or `Failed`; the run's state."""
        ...

    def list_tools(self) -> list[ToolInfo]:
        """Every tool the service may run, with its schema."""
        ...
