"""A dispatch outcome as an MCP tool result (R5): what a model reads, what a harness reads.

    CONFIRMED ............ the tool's result as content, and as structured content
    FAILED, UNKNOWN, STEP_UNRESOLVED, NEEDS_APPROVAL, NEEDS_HUMAN
                       ... isError, with the line of SYSTEM_PROMPT that tells a model what to do
                           (and when to call again, where the service knows)

The outcome, the step index and the idempotency key travel in the result's `_meta` under
`agentsaga.io/...` keys, for harnesses that read them rather than the text.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from agentsaga.client import SYSTEM_PROMPT
from agentsaga.dispatch import DispatchResult
from agentsaga.wording import tool_message

META_OUTCOME = "agentsaga.io/outcome"
META_STEP = "agentsaga.io/step"
META_KEY = "agentsaga.io/idempotencyKey"
META_STATUS = "agentsaga.io/status"
META_RETRY_AFTER = "agentsaga.io/retryAfterSeconds"

SYSTEM_PROMPT_TEXT = SYSTEM_PROMPT


def tool_result(out: DispatchResult) -> types.CallToolResult:
    meta: dict[str, Any] = {META_OUTCOME: out.outcome, META_STEP: out.step_idx,
                            META_KEY: out.key, META_STATUS: out.status}
    retry_after = getattr(out, "retry_after_s", None)
    if retry_after is not None:
        meta[META_RETRY_AFTER] = retry_after
    if out.outcome == "CONFIRMED":
        result = out.result
        structured = result if isinstance(result, dict) else {"result": result}
        text = json.dumps(result, default=str)
        return _with_meta(types.CallToolResult(content=[types.TextContent(text=text)],
                                               structured_content=structured), meta)
    text = tool_message(out.outcome, out.message, retry_after)
    return _with_meta(types.CallToolResult(content=[types.TextContent(text=text)],
                                           is_error=True), meta)


def refused(message: str) -> types.CallToolResult:
    """A request the harness refused before anything was written (bad arguments, an unknown
    tool, an ended run): an error the model can correct; nothing happened."""
    return _with_meta(types.CallToolResult(
        content=[types.TextContent(text=f"REFUSED (nothing was called): {message}")],
        is_error=True), {META_OUTCOME: "REFUSED"})


def _with_meta(result: types.CallToolResult, meta: dict[str, Any]) -> types.CallToolResult:
    """The result with `_meta` set (the field is named by its alias on the wire)."""
    result.meta = meta
    return result
