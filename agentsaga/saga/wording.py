"""What a model reads for each outcome: the lines of `SYSTEM_PROMPT`, so that every front end
(the MCP endpoint, the framework adapters) says exactly what the prompt says; and the first
words of each kind of refusal (`REFUSALS`)."""

from __future__ import annotations

import re

from agentsaga.client import SYSTEM_PROMPT
from agentsaga.errors import ErrorCode

# the outcome's name as SYSTEM_PROMPT spells it
LABELS = {"CONFIRMED": "CONFIRMED", "FAILED": "FAILED", "UNKNOWN": "OUTCOME UNKNOWN",
          "STEP_UNRESOLVED": "STEP UNRESOLVED", "NEEDS_APPROVAL": "NEEDS APPROVAL",
          "NEEDS_HUMAN": "NEEDS HUMAN"}


def prompt_lines(prompt: str = SYSTEM_PROMPT) -> dict[str, str]:
    """`LABEL -> what the prompt tells the model`, read from its `- LABEL: ...` items
    (continuation lines joined)."""
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


_LINES = prompt_lines()


def guidance(outcome: str) -> str:
    """`LABEL: what to do` for an outcome (e.g. UNKNOWN -> `OUTCOME UNKNOWN: the call may...`)."""
    label = LABELS.get(outcome, outcome.replace("_", " "))
    said = _LINES.get(label)
    return f"{label}: {said}" if said else label


def tool_message(outcome: str, message: str = "", retry_after_s: float | None = None) -> str:
    """The whole text of a tool result that did not confirm."""
    text = guidance(outcome)
    if retry_after_s is not None:
        text += f" Call again in {retry_after_s:g} s or later."
    return f"{text}\n({message})" if message else text


REFUSALS: dict[ErrorCode, str] = {
    ErrorCode.NOT_FOUND: "REFUSED (nothing was called)",
    ErrorCode.INVALID_ARGUMENT: "REFUSED (nothing was called)",
    ErrorCode.FAILED_PRECONDITION: "REFUSED (nothing was called or recorded)",
    ErrorCode.PERMISSION_DENIED: "REFUSED: this sidecar may not serve the run (nothing was "
                                 "called)",
    ErrorCode.RESOURCE_EXHAUSTED: "SLOW DOWN: too many calls for this run (nothing was called); "
                                  "call again in a second",
    ErrorCode.TAKEN_OVER: "RUN TAKEN OVER: another owner adopted this run; stop calling tools",
    ErrorCode.UNAVAILABLE: "the saga log is unreachable; nothing was called. Try again later",
    ErrorCode.UNKNOWN: "OUTCOME UNKNOWN: the saga log refused to record this request; do not "
                       "retry with new arguments",
}
"""Every ErrorCode's headline, the first words a model reads (a test checks none is missing)."""
