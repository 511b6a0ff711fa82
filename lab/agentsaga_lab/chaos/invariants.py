"""The campaign's invariants, checked against the world's ground truth and the saga log.

    at_most_once          every intended effect exists at most once in the world
    intent_first          every effect in the world has its saga-log row (R2)
    outcome_matches       a CONFIRMED row's effect exists; a NOT_EXECUTED one's does not
    compensated_once      every CONFIRMED compensatable effect of an unwound run is compensated
                          exactly once (or explicitly handed to a human)
    no_phantom_undo       no compensation of an effect that does not exist
    approved_messages     no customer-facing message sent without an approved pivot
    settled               every row ends settled or explicitly handed to a human; runs end
    no_row_lost           every step the agent was answered about is still in the saga log,
                          and a CONFIRMED answer is never taken back
    masked                no planted card number or secret in clear in anything the
                          campaign produced (`agentsaga_lab.chaos.scan`)

Pure functions of plain data, so a test can feed a doctored ground truth and see it caught.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]
UNDONE_TICKET_MARK = "Rolled back"


@dataclass(frozen=True)
class Violation:
    invariant: str
    run_id: str
    detail: str


@dataclass(frozen=True)
class Answer:
    """What the sidecar told the agent about one step (the campaign's own journal)."""

    run_id: str
    step_idx: int
    key: str
    outcome: str


def effects_by_key(truth: Mapping[str, Any]) -> dict[str, list[tuple[str, Row]]]:
    """Forward effects in the world, by the saga key they carry (R4 markers)."""
    found: dict[str, list[tuple[str, Row]]] = defaultdict(list)
    for pi in truth.get("payment_intents", []):
        key = (pi.get("metadata") or {}).get("saga_key")
        if key:
            found[key].append(("payment_intent", pi))
    for ticket in truth.get("tickets", []):
        keys = {ticket.get("external_id")} if ticket.get("system") == "zendesk" else {
            label[5:] for label in ticket.get("labels", []) if label.startswith("saga-")}
        for key in keys - {None, ""}:
            found[str(key)].append(("ticket", ticket))
    for email in truth.get("emails", []):
        key = email.get("idempotency_key") or (email.get("headers") or {}).get("X-Saga-Key")
        if key:
            found[key].append(("email", email))
    for reship in truth.get("reships", []):
        if reship.get("idempotency_key") and reship.get("status") == "accepted":
            found[reship["idempotency_key"]].append(("reship", reship))
    return found


def undo_count(kind: str, obj: Row, truth: Mapping[str, Any]) -> int:
    """How many times the world shows this effect undone."""
    if kind == "payment_intent":
        refunds = [r for r in truth.get("refunds", []) if r.get("payment_intent") == obj["id"]]
        return len(refunds) + (1 if obj.get("status") == "canceled" else 0)
    if kind == "ticket":
        marks = sum(1 for c in obj.get("comments", []) if UNDONE_TICKET_MARK in c.get("body", ""))
        return marks if obj.get("state") == "closed" else 0
    return 0


def check(runs: Sequence[Row], steps: Sequence[Row], truth: Mapping[str, Any],
          answers: Iterable[Answer], *, human_settled_tools: Iterable[str] = (),
          undoable: Iterable[str] = ("payment_intent", "ticket")) -> list[Violation]:
    """Every violation of the invariants above (empty: all hold)."""
    out: list[Violation] = []
    effects = effects_by_key(truth)
    rows_by_key = {str(s["idempotency_key"]): s for s in steps}
    runs_by_id = {str(r["run_id"]): r for r in runs}
    manual = set(human_settled_tools)
    kinds_undoable = set(undoable)

    for key, found in effects.items():
        row = rows_by_key.get(key)
        run_id = str(row["run_id"]) if row else "?"
        if len(found) > 1:
            out.append(Violation("at_most_once", run_id,
                                 f"the effect of key {key} exists {len(found)} times "
                                 f"({', '.join(str(o.get('id')) for _, o in found)})"))
        if row is None:
            out.append(Violation("intent_first", run_id,
                                 f"{found[0][0]} {found[0][1].get('id')} carries key {key} "
                                 "but no saga-log row has it (R2)"))

    for step in steps:
        run_id, key, status = str(step["run_id"]), str(step["idempotency_key"]), step["status"]
        found = effects.get(key, [])
        where = f"step {step['step_idx']} ({step['tool']}, key {key})"
        run = runs_by_id.get(run_id, {})
        captured = step["tool"] == "capture_payment"  # acts on the charge's own effect
        if status in ("CONFIRMED", "COMPENSATED") and not found and not captured:
            out.append(Violation("outcome_matches", run_id,
                                 f"{where} is {status} but the world has no such effect"))
        if status == "NOT_EXECUTED" and found:
            out.append(Violation("outcome_matches", run_id,
                                 f"{where} is NOT_EXECUTED but its effect exists"))
        if status == "COMPENSATED":
            if not found:
                out.append(Violation("no_phantom_undo", run_id,
                                     f"{where} is COMPENSATED but its effect never existed"))
            else:
                kind, obj = found[0]
                undone = undo_count(kind, obj, truth)
                if kind in kinds_undoable and undone != 1:
                    out.append(Violation("compensated_once", run_id,
                                         f"{where}: the world shows it undone {undone} times"))
        elif found and status != "COMPENSATED":
            kind, obj = found[0]
            if kind in kinds_undoable and undo_count(kind, obj, truth) > 0 \
                    and step["tool_class"] != "irreversible" and step["tool"] != "capture_payment":
                out.append(Violation("no_phantom_undo", run_id,
                                     f"{where} is {status} but the world shows it undone"))
        if (run.get("state") == "unwound" and status == "CONFIRMED"
                and step["tool_class"] in ("compensatable", "reversible")
                and step.get("comp_status") not in ("FAILED", "QUEUED")):
            out.append(Violation("compensated_once", run_id,
                                 f"{where} of an unwound run is CONFIRMED, not compensated"))
        if status == "INTENDED" or (status == "UNKNOWN" and step["tool"] not in manual):
            out.append(Violation("settled", run_id, f"{where} ended {status}"))
        if step.get("comp_status") == "INTENDED":
            out.append(Violation("settled", run_id, f"{where}: its compensation is in flight"))

    for email in truth.get("emails", []):
        sent_key = email.get("idempotency_key") or (email.get("headers") or {}).get("X-Saga-Key")
        row = rows_by_key.get(str(sent_key))
        pivot = (runs_by_id.get(str(row["run_id"]), {}).get("pivot") or {}) if row else {}
        if row is None or not row.get("after_pivot") or pivot.get("decision") != "Approved":
            out.append(Violation("approved_messages", str(row["run_id"]) if row else "?",
                                 f"email {email.get('id')} to {email.get('to')} was sent "
                                 "without an approved pivot"))

    for run in runs:
        if run.get("ended_at") is None:
            out.append(Violation("settled", str(run["run_id"]),
                                 f"the run never ended (state {run.get('state')})"))

    for answer in answers:
        row = rows_by_key.get(answer.key)
        if row is None:
            out.append(Violation("no_row_lost", answer.run_id,
                                 f"step {answer.step_idx} (key {answer.key}) was answered "
                                 f"{answer.outcome} but has no saga-log row"))
        elif answer.outcome == "CONFIRMED" and row["status"] not in ("CONFIRMED", "COMPENSATED"):
            out.append(Violation("no_row_lost", answer.run_id,
                                 f"step {answer.step_idx} was answered CONFIRMED but its row is "
                                 f"{row['status']}"))
    return out
