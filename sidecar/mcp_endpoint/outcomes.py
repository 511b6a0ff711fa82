"""A dispatch outcome, or a refusal, as an MCP tool result (R5): what a model reads, what a
harness reads.

    CONFIRMED ............ the tool's result as content, and as structured content
    FAILED, UNKNOWN, STEP_UNRESOLVED, NEEDS_APPROVAL, NEEDS_HUMAN
                       ... isError, with the line of SYSTEM_PROMPT that tells a model what to do
                           (and when to call again, where the service knows)
    a refused request .... isError, worded by the error's `error_code` in one table (REFUSALS,
                           the MCP counterpart of the gRPC adapter's STATUS): nothing was called

The outcome, the step index and the idempotency key travel in the result's `_meta` under
`agentsaga.io/...` keys, for harnesses that read them rather than the text; a refusal carries
its error code there.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from agentsaga.calls import DispatchResult
from agentsaga.client import SYSTEM_PROMPT
from agentsaga.errors import SagaError
from agentsaga.saga.wording import REFUSALS, tool_message
from agentsaga.states import DispatchOutcome

__all__ = ["REFUSALS", "SYSTEM_PROMPT", "internal_error", "refusal", "tool_result"]

META_OUTCOME = "agentsaga.io/outcome"
META_STEP = "agentsaga.io/step"
META_KEY = "agentsaga.io/idempotencyKey"
META_STATUS = "agentsaga.io/status"
META_RETRY_AFTER = "agentsaga.io/retryAfterSeconds"
META_ERROR = "agentsaga.io/error"
REFUSED = "REFUSED"
INTERNAL = "INTERNAL"


def tool_result(out: DispatchResult) -> types.CallToolResult:
    meta: dict[str, Any] = {META_OUTCOME: str(out.outcome), META_STEP: out.step_idx,
                            META_KEY: out.key, META_STATUS: str(out.status)}
    # set by services that know when an unknown outcome may be settled (time contracts)
    retry_after: float | None = getattr(out, "retry_after_s", None)
    if retry_after is not None:
        meta[META_RETRY_AFTER] = retry_after
    if out.outcome == DispatchOutcome.CONFIRMED:
        result = out.result
        structured = result if isinstance(result, dict) else {"result": result}
        text = json.dumps(result, default=str)
        return _with_meta(types.CallToolResult(content=[types.TextContent(text=text)],
                                               structured_content=structured), meta)
    text = tool_message(out.outcome, out.message, retry_after)
    return _with_meta(types.CallToolResult(content=[types.TextContent(text=text)],
                                           is_error=True), meta)


def refusal(exc: SagaError) -> types.CallToolResult:
    """A request the service refused before anything was written or called (bad arguments, an
    unknown tool, an ended run, a run taken over): an error the model can act on."""
    code = exc.error_code
    meta: dict[str, Any] = {META_OUTCOME: REFUSED, META_ERROR: str(code)}
    retry_after: float | None = getattr(exc, "retry_after_s", None)
    if retry_after is not None:  # a bound that says when (the run bounds of Postgres)
        meta[META_RETRY_AFTER] = retry_after
    return _with_meta(types.CallToolResult(
        content=[types.TextContent(text=f"{REFUSALS[code]}: {exc}")], is_error=True), meta)


def internal_error(tool: str, exc: Exception) -> types.CallToolResult:
    """A bug, answered without internals (as gRPC's INTERNAL); the model is told what it is
    told of an unknown outcome, since the call may have been made."""
    return _with_meta(types.CallToolResult(
        content=[types.TextContent(text=tool_message(
            DispatchOutcome.UNKNOWN, f"{tool}: the sidecar failed ({type(exc).__name__})"))],
        is_error=True), {META_OUTCOME: INTERNAL, META_ERROR: INTERNAL.lower()})


def _with_meta(result: types.CallToolResult, meta: dict[str, Any]) -> types.CallToolResult:
    """The result with `_meta` set (the field is named by its alias on the wire)."""
    result.meta = meta
    return result
