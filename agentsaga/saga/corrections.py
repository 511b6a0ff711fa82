"""Corrections (R9): what people saw cannot be taken back; a person decides what to say.

Every effect an unwind cannot undo silently gets a row in `corrections`, ranked by blast radius:
internal audiences first (the agent, then the support team, the warehouse, finance), anything
that reached the customer last. A row is `Proposed` (waiting for a human, never sent by the
harness) only when its audience really saw the original: an irreversible message, or a
compensated step whose effect reached the customer (a charge with a receipt). Everything else
is recorded as `Silent`: a refund with receipts off needs no letter.

An irreversible tool's `compensate=` is its correction (written before the call, R6). One that
declares none still gets a `Proposed` correction, with no tool to send it: a person writes and
sends it, and dismisses the entry with a reason; approving it for sending is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentsaga.errors import CorrectionError, Rejected, UnknownTool
from agentsaga.keys import step_key
from agentsaga.saga.registry import Effect, Registry, ToolSpec, as_effect
from agentsaga.states import CORRECTIONS_TO_SEND, CorrectionState
from agentsaga.store import Correction, Step
from agentsaga.store.interfaces import JobStore, OperatorStore

__all__ = ["Correction", "correction_key", "customer_saw", "decide", "plan", "rank",
           "send_approved"]

# Blast radius by audience: lower is more internal; unknown audiences sit between.
RANKS: dict[str, int] = {"agent": 0, "support_team": 10, "warehouse": 20, "finance": 30,
                         "customer": 100}
OTHER_RANK = 50


def rank(audience: Sequence[str]) -> int:
    """The widest audience decides: a step the customer saw ranks last."""
    return max((RANKS.get(a, OTHER_RANK) for a in audience), default=0)


def customer_saw(audience: Sequence[str]) -> bool:
    return "customer" in audience


def plan(step: Step) -> Correction:
    """The correction for one step that the unwind compensated or could not undo."""
    audience = list(step.audience)
    if step.tool_class == "irreversible":
        # someone read it; the pre-written correction (template, recipients) waits for a human
        outside = any(a != "agent" for a in audience)
        state = CorrectionState.PROPOSED if outside else CorrectionState.SILENT
        body = step.compensation
    elif customer_saw(audience):
        state = CorrectionState.PROPOSED
        body = {"tool": "send_correction", "args": {
            "template": f"{step.tool}_reversed", "to": ["customer"],
            "about": step.external_ref, "original_key": step.idempotency_key}}
    else:
        state, body = CorrectionState.SILENT, None
    return Correction(run_id=step.run_id, step_idx=step.step_idx, tool=step.tool,
                      audience=audience, rank=rank(audience), state=state, correction=body)


# -- the human's decision, and sending what was approved -------------------------------------


def decide(saga_log: OperatorStore, run_id: str, step_idx: int, decision: str, approver: str,
           reason: str = "") -> Correction:
    """Approve or dismiss a proposed correction, once. Sending is `send_approved`'s job."""
    if decision not in ("Approved", "Rejected"):
        raise CorrectionError(f"decision {decision!r}: use Approved or Rejected")
    if not approver:
        raise CorrectionError("the decision names no approver")
    state = CorrectionState.APPROVED if decision == "Approved" else CorrectionState.DISMISSED
    if state == CorrectionState.APPROVED:
        current = next((c for c in saga_log.corrections(run_id) if c.step_idx == step_idx), None)
        if current is not None and not _tool_of(current):
            raise CorrectionError(unwritten(current))
    return saga_log.decide_correction(run_id, step_idx, state, approver, reason)


def _tool_of(correction: Correction) -> str:
    body = correction.correction
    return str(body.get("tool") or "") if isinstance(body, dict) else ""


def unwritten(correction: Correction) -> str:
    """What to do about a correction no tool can send: its irreversible tool declares no
    `compensate=` (which, for an irreversible tool, is its correction)."""
    return (f"the correction for step {correction.step_idx} ({correction.tool}) has no tool to "
            f"send it: {correction.tool!r} declares no compensate=, which for an irreversible "
            "tool is its correction. A person writes and sends it; then record that with "
            f"`agentsaga corrections --run {correction.run_id} --dismiss {correction.step_idx} "
            "--reason 'sent by hand: ...'`")


def correction_key(run_id: str, step_idx: int, tool: str) -> str:
    """A correction is a side effect of its own, under its own key."""
    return step_key(run_id, step_idx, "correct:" + tool)


def send_approved(saga_log: JobStore, registry: Registry, run_id: str) -> list[dict[str, Any]]:
    """Send every approved correction of the run, internal audiences first.

    Each is marked Sending (committed) before the call and sent under its own key; one found
    Sending after a crash is first looked up by that key, so nothing is sent twice (R2, R7)."""
    results: list[dict[str, Any]] = []
    for item in saga_log.corrections(run_id):
        if item.state not in CORRECTIONS_TO_SEND:
            continue
        body = item.correction or {}
        entry: dict[str, Any] = {"step_idx": item.step_idx, "tool": body.get("tool")}
        if not _tool_of(item):
            results.append({**entry, "tool": item.tool, "sent": False, "why": unwritten(item)})
            continue
        try:
            spec = registry.get(str(body.get("tool")))
            key = correction_key(run_id, item.step_idx, spec.name)
            effect = _sent_before(spec, key) if item.state == CorrectionState.SENDING else None
            if effect is None:
                if (item.state == CorrectionState.APPROVED
                        and not saga_log.claim_correction(run_id, item.step_idx)):
                    continue  # another sender took it
                effect = as_effect(spec.fn(**dict(body.get("args") or {}), idempotency_key=key))
        except (UnknownTool, Rejected) as exc:
            results.append({**entry, "sent": False, "why": str(exc)})
            continue
        except Exception as exc:  # unknown outcome: stays Sending, looked up on the next run
            results.append({**entry, "sent": False, "why": f"{type(exc).__name__}: {exc}"})
            continue
        saga_log.mark_correction_sent(item)
        results.append({**entry, "sent": True, "ref": None if effect is None else effect.ref})
    return results


def _sent_before(spec: ToolSpec, key: str) -> Effect | None:
    """A correction left Sending by a crash: did it go out? (No lookup: resend under the key,
    which the real system deduplicates.)"""
    return None if spec.lookup is None else as_effect(spec.lookup(key))
