"""The essay's model, scripted: it plans search, ticket, charge, reship; and it has the habits
the essay describes. After an unknown outcome it moves on to the next step (it reorders the
plan), then retries the ticket in new words; it reads an unanswered charge as done and goes on
to the reship; when the reship is refused it stops. What the harness answers decides each next
move, read from the tool result's text as a model would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentsaga_lab.demo.model import CHARGE, RESHIP, SEARCH, TICKET, TICKET_REWORDED, Call

LABELS = ("OUTCOME UNKNOWN", "STEP UNRESOLVED", "FAILED", "NEEDS APPROVAL", "NEEDS HUMAN",
          "REFUSED")
GAVE_UP = "The warehouse refused the reship, so the run has to be unwound."
DONE = "Refund and reship are done."
NEXT = {SEARCH.tool: TICKET, TICKET.tool: CHARGE, CHARGE.tool: RESHIP}


def label(text: str) -> str:
    """How the model reads a tool result: its first words, else it is a result (CONFIRMED)."""
    return next((x for x in LABELS if text.lstrip().startswith(x)), "CONFIRMED")


@dataclass
class EssayModel:
    history: list[tuple[Call, str]]

    def __init__(self) -> None:
        self.history = []

    def observe(self, call: Call, text: str) -> None:
        self.history.append((call, label(text)))

    def decide(self) -> Call | str:
        """The next tool call, or the final answer."""
        if not self.history:
            return SEARCH
        call, seen = self.history[-1]
        confirmed = {c.tool for c, s in self.history if s == "CONFIRMED"}
        if seen == "OUTCOME UNKNOWN":
            # the ticket: on with the plan; the charge: silence read as success
            return CHARGE if call.tool == TICKET.tool else RESHIP
        if seen == "STEP UNRESOLVED":
            return TICKET_REWORDED if TICKET.tool not in confirmed else CHARGE
        if seen == "CONFIRMED":
            return NEXT.get(call.tool, DONE)
        return GAVE_UP

    def tool_calls(self) -> list[dict[str, Any]]:
        return [{"tool": c.tool, "args": c.args, "saw": s} for c, s in self.history]
