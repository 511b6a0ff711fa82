"""Corrections (R9): what people saw cannot be taken back; a person decides what to say.

Every effect an unwind cannot undo silently gets a row in `corrections`, ranked by blast radius:
internal audiences first (the agent, then the support team, the warehouse, finance), anything
that reached the customer last. A row is `Proposed` (waiting for a human, never sent by the
harness) only when its audience really saw the original: an irreversible message, or a
compensated step whose effect reached the customer (a charge with a receipt). Everything else
is recorded as `Silent`: a refund with receipts off needs no letter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from agentsaga import telemetry
from agentsaga.errors import Fenced, PivotError, Rejected, RunNotFound, UnknownTool
from agentsaga.keys import step_key
from agentsaga.log import SagaLog, Step
from agentsaga.registry import Effect, Registry, ToolSpec, as_effect

# Blast radius by audience: lower is more internal; unknown audiences sit between.
RANKS: dict[str, int] = {"agent": 0, "support_team": 10, "warehouse": 20, "finance": 30,
                         "customer": 100}
OTHER_RANK = 50


def rank(audience: Sequence[str]) -> int:
    """The widest audience decides: a step the customer saw ranks last."""
    return max((RANKS.get(a, OTHER_RANK) for a in audience), default=0)


def customer_saw(audience: Sequence[str]) -> bool:
    return "customer" in audience


@dataclass(frozen=True)
class Correction:
    run_id: str
    step_idx: int
    tool: str
    audience: list[str]
    rank: int
    state: str
    """`Proposed` (a human must decide) or `Silent` (nobody outside saw it)."""
    correction: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {"step_idx": self.step_idx, "tool": self.tool, "audience": self.audience,
                "rank": self.rank, "state": self.state, "correction": self.correction}


def plan(step: Step) -> Correction:
    """The correction for one step that the unwind compensated or could not undo."""
    audience = list(step.audience)
    if step.tool_class == "irreversible":
        # someone read it; the pre-written correction (template, recipients) waits for a human
        outside = any(a != "agent" for a in audience)
        state = "Proposed" if outside else "Silent"
        body = step.compensation
    elif customer_saw(audience):
        state = "Proposed"
        body = {"tool": "send_correction", "args": {
            "template": f"{step.tool}_reversed", "to": ["customer"],
            "about": step.external_ref, "original_key": step.idempotency_key}}
    else:
        state, body = "Silent", None
    return Correction(step.run_id, step.step_idx, step.tool, audience, rank(audience), state,
                      body)


def record(log: SagaLog, epoch: int, correction: Correction) -> None:
    """Store the correction once (R12: only the run's current owner writes)."""
    with log.pool.connection() as conn, conn.transaction():
        row = conn.execute("SELECT owner_epoch FROM saga_runs WHERE run_id = %s FOR SHARE",
                           (correction.run_id,)).fetchone()
        if row is None:
            raise RunNotFound(correction.run_id)
        if row["owner_epoch"] != epoch:
            raise Fenced(correction.run_id, epoch, row["owner_epoch"])
        body = None if correction.correction is None else Jsonb(correction.correction)
        inserted = conn.execute(
            "INSERT INTO corrections (run_id, step_idx, tool, audience, rank, correction, state)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (run_id, step_idx) DO NOTHING"
            " RETURNING step_idx",
            (correction.run_id, correction.step_idx, correction.tool, correction.audience,
             correction.rank, body, correction.state),
        ).fetchone()
    if inserted is not None:
        telemetry.correction_recorded(correction.tool, correction.state, correction.step_idx,
                                      correction.audience)


def for_run(log: SagaLog, run_id: str) -> list[Correction]:
    """A run's corrections in the order a human should see them: internal first."""
    with log.pool.connection() as conn:
        rows = conn.execute(
            "SELECT run_id, step_idx, tool, audience, rank, state, correction FROM corrections"
            " WHERE run_id = %s ORDER BY rank, step_idx DESC", (run_id,)).fetchall()
    return [Correction(**r) for r in rows]


# -- the human's decision, and sending what was approved -------------------------------------


def decide(log: SagaLog, run_id: str, step_idx: int, decision: str, approver: str,
           reason: str = "") -> Correction:
    """Approve or dismiss a proposed correction, once. Sending is `send_approved`'s job."""
    if decision not in ("Approved", "Rejected"):
        raise PivotError(f"decision {decision!r}: use Approved or Rejected")
    if not approver:
        raise PivotError("the decision names no approver")
    state = "Approved" if decision == "Approved" else "Dismissed"
    with log.pool.connection() as conn, conn.transaction():
        row = conn.execute(
            "UPDATE corrections SET state = %s, approver = %s, reason = %s, decided_at = now()"
            " WHERE run_id = %s AND step_idx = %s AND state = 'Proposed'"
            " RETURNING run_id, step_idx, tool, audience, rank, state, correction",
            (state, approver, reason, run_id, step_idx)).fetchone()
        if row is None:
            current = conn.execute(
                "SELECT state FROM corrections WHERE run_id = %s AND step_idx = %s",
                (run_id, step_idx)).fetchone()
    if row is None:
        if current is None:
            raise PivotError(f"run {run_id!r} has no correction for step {step_idx}")
        raise PivotError(f"the correction for step {step_idx} of run {run_id!r} is "
                         f"{current['state']}, not Proposed; nothing was changed")
    decided = Correction(**row)
    telemetry.correction_recorded(decided.tool, decided.state, step_idx, decided.audience)
    return decided


def correction_key(run_id: str, step_idx: int, tool: str) -> str:
    """A correction is a side effect of its own, under its own key."""
    return step_key(run_id, step_idx, "correct:" + tool)


def send_approved(log: SagaLog, registry: Registry, run_id: str) -> list[dict[str, Any]]:
    """Send every approved correction of the run, internal audiences first.

    Each is marked Sending (committed) before the call and sent under its own key; one found
    Sending after a crash is first looked up by that key, so nothing is sent twice (R2, R7)."""
    results: list[dict[str, Any]] = []
    for item in for_run(log, run_id):
        if item.state not in ("Approved", "Sending"):
            continue
        body = item.correction or {}
        entry: dict[str, Any] = {"step_idx": item.step_idx, "tool": body.get("tool")}
        try:
            spec = registry.get(str(body.get("tool")))
            key = correction_key(run_id, item.step_idx, spec.name)
            effect = _sent_before(spec, key) if item.state == "Sending" else None
            if effect is None:
                if item.state == "Approved" and not _claim(log, run_id, item.step_idx):
                    continue  # another sender took it
                effect = as_effect(spec.fn(**dict(body.get("args") or {}), idempotency_key=key))
        except (UnknownTool, Rejected) as exc:
            results.append({**entry, "sent": False, "why": str(exc)})
            continue
        except Exception as exc:  # unknown outcome: stays Sending, looked up on the next run
            results.append({**entry, "sent": False, "why": f"{type(exc).__name__}: {exc}"})
            continue
        with log.pool.connection() as conn:
            conn.execute("UPDATE corrections SET state = 'Sent' WHERE run_id = %s"
                         " AND step_idx = %s AND state = 'Sending'", (run_id, item.step_idx))
        telemetry.correction_recorded(item.tool, "Sent", item.step_idx, item.audience)
        results.append({**entry, "sent": True, "ref": None if effect is None else effect.ref})
    return results


def _claim(log: SagaLog, run_id: str, step_idx: int) -> bool:
    """Approved -> Sending, durably, before the call; False if someone else claimed it."""
    with log.pool.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL synchronous_commit TO on")
        row = conn.execute("UPDATE corrections SET state = 'Sending' WHERE run_id = %s"
                           " AND step_idx = %s AND state = 'Approved' RETURNING step_idx",
                           (run_id, step_idx)).fetchone()
    return row is not None


def _sent_before(spec: ToolSpec, key: str) -> Effect | None:
    """A correction left Sending by a crash: did it go out? (No lookup: resend under the key,
    which the real system deduplicates.)"""
    return None if spec.lookup is None else as_effect(spec.lookup(key))
