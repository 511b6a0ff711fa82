"""agentsaga: sagas for LLM agents.

Every side-effecting tool call goes through an intent log in Postgres, under an idempotency key
derived from (run, step, tool); unknown outcomes are settled by asking the real system by key
before anything is retried or undone.

    from agentsaga import tool, Compensation, Rejected, OutcomeUnknown

    @tool(cls="compensatable", audience=["support_team"],
          compensate=lambda args, key: Compensation("close_ticket", {"by_key": key}),
          lookup=find_ticket_by_key)
    def create_ticket(summary: str, order_id: str, idempotency_key: str) -> dict: ...
"""

from typing import TYPE_CHECKING, Any

from agentsaga.errors import (
    CompensationUnavailable,
    ConfigurationError,
    CorrectionError,
    DatabaseUnavailable,
    DecisionError,
    ErrorCode,
    Fenced,
    InvalidArguments,
    InvalidRunId,
    LogUnavailable,
    OutcomeUnknown,
    PermissionDenied,
    PivotError,
    RateLimited,
    RegistrationError,
    Rejected,
    RequestError,
    RunEnded,
    RunNotFound,
    RunUnsettled,
    SagaError,
    SettlementError,
    ToolError,
    UnknownTool,
)
from agentsaga.keys import compensation_key, step_key
from agentsaga.saga.registry import (
    NO_LOOKUP,
    TOOL_CLASSES,
    Compensation,
    Effect,
    LookupContext,
    Registry,
    ToolSpec,
    default_registry,
    ref,
    register,
    tool,
)
from agentsaga.time_contract import TimeContract

__all__ = [
    "NO_LOOKUP",
    "TOOL_CLASSES",
    "Compensation",
    "CompensationUnavailable",
    "ConfigurationError",
    "CorrectionError",
    "DatabaseUnavailable",
    "DecisionError",
    "Effect",
    "ErrorCode",
    "Fenced",
    "InvalidArguments",
    "InvalidRunId",
    "LogUnavailable",
    "LookupContext",
    "OutcomeUnknown",
    "PermissionDenied",
    "PivotError",
    "RateLimited",
    "Registry",
    "RegistrationError",
    "Rejected",
    "RequestError",
    "RunEnded",
    "RunNotFound",
    "RunUnsettled",
    "SagaError",
    "SettlementError",
    "TimeContract",
    "ToolError",
    "ToolNeedsHuman",
    "ToolSpec",
    "UnknownTool",
    "compensation_key",
    "default_registry",
    "ref",
    "register",
    "step_key",
    "tool",
]

if TYPE_CHECKING:
    from agentsaga.client.errors import ToolNeedsHuman


def __getattr__(name: str) -> Any:
    """The agent-side `ToolNeedsHuman`, imported on first use (it brings gRPC along, which a
    tools module importing `agentsaga` does not need)."""
    if name == "ToolNeedsHuman":
        from agentsaga.client.errors import ToolNeedsHuman

        return ToolNeedsHuman
    raise AttributeError(f"module 'agentsaga' has no attribute {name!r}")
