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
import re
from typing import Any

import mcp_types as types

from agentsaga.client import SYSTEM_PROMPT
from agentsaga.dispatch import DispatchResult

META_OUTCOME = "agentsaga.io/outcome"
META_STEP = "agentsaga.io/step"
META_KEY = "agentsaga.io/idempotencyKey"
META_STATUS = "agentsaga.io/status"
META_RETRY_AFTER = "agentsaga.io/retryAfterSeconds"

# the outcome's name as SYSTEM_PROMPT spells it
_LABELS = {"CONFIRMED": "CONFIRMED", "FAILED": "FAILED", "UNKNOWN": "OUTCOME UNKNOWN",
           "STEP_UNRESOLVED": "STEP UNRESOLVED", "NEEDS_APPROVAL": "NEEDS APPROVAL",
           "NEEDS_HUMAN": "NEEDS HUMAN"}


def prompt_lines(prompt: str = SYSTEM_PROMPT) -> dict[str, str]:
    """`LABEL -> what the prompt tells the model`, read from the prompt's `- LABEL: ...` items
    (continuation lines joined), so that the endpoint and the prompt never say two things."""
    lines: dict[str, str] = {}
    current = ""
    for raw in prompt.splitlines():
        item = re.match(r"^- ([A-Z][A-Z ]+): (.*)$", raw)
        if item:
            current = item.group(1)
            lines[current] = item.group(2).strip()
        elif current and raw.startswith("  "):
            lines[current] += " " + raw.strip()
        else:
            current = ""
    return lines


_GUIDANCE = prompt_lines()
SYSTEM_PROMPT_TEXT = SYSTEM_PROMPT


def guidance(outcome: str) -> str:
    """The text a model gets for an outcome: `LABEL: what to do`."""
    label = _LABELS.get(outcome, outcome.replace("_", " "))
    said = _GUIDANCE.get(label)
    return f"{label}: {said}" if said else label


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
        return types.CallToolResult(content=[types.TextContent(text=text)],
                                    structured_content=structured, meta=meta)
    text = guidance(out.outcome)
    if retry_after is not None:
        text += f" Call again in {retry_after:g} s or later."
    if out.message:
        text += f"\n({out.message})"
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True, meta=meta)


def refused(message: str) -> types.CallToolResult:
    """A request the harness refused before anything was written (bad arguments, an unknown
    tool, an ended run): an error the model can correct; nothing happened."""
    return types.CallToolResult(
        content=[types.TextContent(text=f"REFUSED (nothing was called): {message}")],
        is_error=True, meta={META_OUTCOME: "REFUSED"})
