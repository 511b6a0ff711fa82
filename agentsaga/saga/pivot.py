"""The pivot (R10): before it only pure, reversible and authorise-only steps; the pivot is one
human approval of the whole staged plan; after it, only the approved commit steps run.

This module holds the plan (its hash and its record in `saga_runs.pivot`) and the gate that
every side-effecting call passes before its INTENDED row is written.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from agentsaga import telemetry
from agentsaga.errors import (
    ApprovalExpired,
    InvalidArguments,
    InvalidDecision,
    PivotError,
    RunEnded,
)
from agentsaga.redact import mask_cards_value, redact_plan
from agentsaga.saga.registry import JSON, Registry, ToolSpec
from agentsaga.saga.tool_schema import CALL_AGAIN, args_too_large, check_arguments, sent_size
from agentsaga.states import RUN_STATE_AFTER_DECISION, PivotState, RunState
from agentsaga.store import PivotRecord, Run, Step
from agentsaga.store.decisions import Watch
from agentsaga.store.interfaces import OperatorStore, SidecarStore
from agentsaga.waiting import waiting

Policy = Literal["refuse", "count"]


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def plan_hash(staged: list[JSON], commit: list[JSON]) -> str:
    """The hash a human approves (a full SHA-256), over exactly what they are shown and exactly
    what will run: the steps done so far and every commit step whole, its tool, class and
    audience, its arguments as shown (`shown_args`: card numbers masked to their last four and a
    keyed digest) and the keyed digest of its raw arguments (`argsDigest`, the only arguments
    its call is admitted with). The operator recomputes it from the stored plan, and checks
    each shown argument against its digest, before it records a decision."""
    return hashlib.sha256(canonical({"staged": staged, "commit": commit}).encode()).hexdigest()


def as_stored(value: Any) -> Any:
    """`value` as the saga log's JSON gives it back: Postgres keeps a number's digits, not its
    float, so a float of 1e16 or more (always integral) comes back an integer. Digests and the
    plan hash are taken over this form, so that what the log holds digests alike."""
    if isinstance(value, float) and math.isfinite(value) and abs(value) >= 1e16:
        return int(value)
    if isinstance(value, dict):
        return {k: as_stored(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_stored(v) for v in value]
    return value


def shown_args(args: JSON, key: str) -> JSON:
    """A commit step's arguments as the approver reads them: whole, but each card number masked
    to its last four digits and a digest of the whole number keyed with the run's digest `key`
    (`agentsaga.redact.mask_cards`), so two cards ending alike look different."""
    shown: JSON = mask_cards_value(as_stored(args), key)
    return shown


def args_digest(args: JSON, key: str) -> str:
    """HMAC-SHA-256, under the run's secret `key` (`PivotRecord.digest_key`), of a commit
    step's canonical raw arguments, taken when the plan is staged: a call after the pivot is
    admitted only with exactly these arguments (the stored arguments are masked,
    `agentsaga.redact`, and two cards ending in the same four digits mask alike). Keyed, so the
    digest shown beside `[card ****4242]` cannot be brute-forced back to the card number by
    whoever reads the status; a plan staged before keys existed has none (plain SHA-256)."""
    data = canonical(as_stored(args)).encode()
    if not key:
        return hashlib.sha256(data).hexdigest()
    return hmac.new(base64.urlsafe_b64decode(key), data, hashlib.sha256).hexdigest()


def new_digest_key() -> str:
    """32 random bytes, base64url: (unlike hex) never a run of digits that the log's card
    masking could take for a card number."""
    return secrets.token_urlsafe(32) + "="


@dataclass(frozen=True)
class Admission:
    """The gate's answer for one call."""

    allowed: bool
    reason: str = ""
    after_pivot: bool = False
    counts_irreversible: bool = False
    """R10: the call is irreversible, before the pivot, and runs under the `count` policy."""
    commit_index: int | None = None
    """Which approved commit step this call is."""


def admit(run: Run, spec: ToolSpec, args: JSON, policy: Policy,
          taken: Callable[[], set[int]] = set) -> Admission:
    """May this side-effecting call run now? Pure tools never come here. `taken`: the approved
    commit steps that a live row of the run carries out already (read only after the pivot)."""
    pivot = run.pivot
    state = None if pivot is None else pivot.state
    if pivot is not None and state == PivotState.AWAITING_APPROVAL:
        return Admission(False, f"the run is waiting for approval of plan {pivot.plan_hash}; "
                                "no side effects until a human decides")
    if pivot is not None and state == PivotState.APPROVED:
        used = taken()
        # the stored plan's arguments have their card numbers masked (agentsaga.redact); what
        # was approved exactly is the digest of the raw arguments, taken when it was staged
        digest = args_digest(args, pivot.digest_key)
        shown = _shown_forms(args, pivot.digest_key)
        # and what the approver read of them: the call's own arguments, masked, are the ones
        # shown (a plan whose shown arguments and digest disagree admits neither)
        matching = [index for index, step in enumerate(pivot.commit)
                    if step.get("tool") == spec.name and step.get("argsDigest") == digest
                    and canonical(step.get("args", {})) in shown]
        for index in matching:
            if index not in used:
                return Admission(True, after_pivot=True, commit_index=index)
        if matching:  # R10: each approved commit step runs once
            return Admission(False, f"{spec.name} with these arguments already ran: it is "
                                    f"commit step {matching[-1]} of the approved plan "
                                    f"{pivot.plan_hash}, and each approved step runs "
                                    "once. Its outcome is in the saga log (GetRun); do not "
                                    "call it again")
        return Admission(False, f"{spec.name} with these arguments is not in the approved plan "
                                f"{pivot.plan_hash}; a changed plan needs a new approval")
    if state == PivotState.REJECTED:
        return Admission(False, "the plan was rejected; the run is being unwound")
    if spec.commit_step:
        return Admission(False, f"{spec.name} is a commit step: stage it in the plan and call it "
                                "after the pivot is approved")
    if spec.needs_approval:
        why = "irreversible" if spec.cls == "irreversible" else "without a compensation"
        if policy == "count":
            return Admission(True, counts_irreversible=True)
        return Admission(False, f"{spec.name} is {why}: it needs human approval at the pivot "
                                "before it runs (R6, R10)")
    return Admission(True)


def _shown_forms(args: JSON, key: str) -> set[str]:
    """The canonical texts `args` may be shown as in an approved plan: with its cards' keyed
    digests, or (a plan staged before they were shown) their last four digits only."""
    return {canonical(shown_args(args, key)), canonical(shown_args(args, ""))}


# -- staging and deciding ---------------------------------------------------------------------


def staged_steps(steps: list[Step]) -> list[JSON]:
    """The steps done so far, as the approver sees them."""
    return [
        {"step": s.step_idx, "tool": s.tool, "class": s.tool_class, "status": s.status,
         "audience": list(s.audience), "externalRef": s.external_ref or ""}
        for s in steps
    ]


def commit_steps(plan: list[JSON], registry: Registry, key: str,
                 max_args_bytes: int) -> list[JSON]:
    """Validate the commit plan against the registry: known, side-effecting tools, arguments
    the tool takes (typed, as its call will be checked) and of a size its call may send
    (`max_args_bytes`, AGENTSAGA_MAX_ARGS_BYTES); each step's arguments digested under the
    run's `key`."""
    checked: list[JSON] = []
    for index, item in enumerate(plan):
        tool, args = item.get("tool"), item.get("args", {})
        if not isinstance(tool, str) or not isinstance(args, dict):
            raise InvalidArguments(
                f'commit step {index}: expected {{"tool": "<name>", "args": {{...}}}}, '
                f"got {item!r}")
        spec = registry.get(tool)
        if spec.cls == "pure":
            raise InvalidArguments(f"commit step {index}: {tool} is pure and needs no approval")
        # sized and typed as the call will be (R2): an approved step that cannot run helps
        # nobody
        too_large = args_too_large(sent_size(args), max_args_bytes)
        if too_large:
            raise _not_staged(index, too_large)
        try:
            check_arguments(spec, args)
        except InvalidArguments as exc:
            raise _not_staged(index, str(exc).removesuffix(CALL_AGAIN)) from None
        checked.append({"tool": tool, "args": shown_args(args, key),
                        "argsDigest": args_digest(args, key),
                        "class": spec.cls, "audience": spec.audience(args)})
    return checked


def _not_staged(index: int, problem: str) -> InvalidArguments:
    return InvalidArguments(f"commit step {index}: {problem} Nothing was staged; reach the "
                            "pivot again with corrected arguments.")


def stage(saga_log: SidecarStore, registry: Registry, run_id: str, epoch: int,
          plan: list[JSON], *, max_args_bytes: int,
          now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> PivotRecord:
    """R10: stage the whole plan for one human approval; returns the pivot record as stored
    (and as the approver sees it: card numbers masked with their keyed digest, nothing else).
    A commit step whose arguments are over `max_args_bytes` (AGENTSAGA_MAX_ARGS_BYTES) is
    refused, as its call would be; so is a plan too large to review whole (`too_large`).

    A staged plan does not change (a trigger of the saga log refuses it, migration 019):
    staging the same plan again (a restarted agent) changes nothing and returns it; another
    plan is refused while the staged one awaits a decision, and replaces it only once that
    one's approval time-to-live (`approval_ttl`) has passed, undecided."""
    with telemetry.pivot_stage_span(run_id) as span:
        run = saga_log.require_owner(run_id, epoch)
        if not run.open:
            raise RunEnded(f"run {run_id!r} has ended ({run.state}); it has no pivot to reach")
        current = run.pivot
        if current is not None and current.decided:
            raise PivotError(f"run {run_id!r} already passed its pivot ({current.state}); a "
                             "run has a single pivot")
        steps = saga_log.steps(run_id)
        unresolved = [s for s in steps if not s.settled]
        if unresolved:
            raise PivotError(f"step {unresolved[-1].step_idx} ({unresolved[-1].tool}) has an "
                             "unknown outcome; resolve it before staging the plan")
        # staging the same plan again (a restarted agent) gives the same planHash
        key = (current.digest_key if current is not None else "") or new_digest_key()
        commit = commit_steps(plan, registry, key, max_args_bytes)
        record = stored_form(PivotRecord(
            state=PivotState.AWAITING_APPROVAL, plan_hash="", staged_at=_now(),
            staged=staged_steps(steps), commit=commit,
            irreversible_before_pivot=run.irreversible_before_pivot, digest_key=key))
        record = replace(record, plan_hash=plan_hash(record.staged, record.commit))
        refused = too_large(record)
        if refused is not None:
            raise InvalidArguments(
                f"{refused}: too large to review, so it was not staged and nothing was "
                "written. Stage a smaller plan (fewer or shorter commit steps), or split the "
                "work into more than one run.")
        ttl = approval_ttl(run.policy)
        if current is not None and not expired(current, ttl, now()):
            if current.plan_hash != record.plan_hash:
                raise PivotError(
                    f"run {run_id!r} awaits a decision on plan {current.plan_hash}, staged at "
                    f"{current.staged_at}; a staged plan cannot be changed. Another plan may "
                    f"be staged once this one is rejected, or after its approval time-to-live "
                    f"({ttl:g}s, spec.pivot.approvalTtlSeconds) has passed undecided. Nothing "
                    "was staged.")
            stored = saga_log.update_run(run_id, epoch,
                                         state=RunState.AWAITING_APPROVAL).pivot or current
        else:
            stored = saga_log.update_run(run_id, epoch, pivot=record,
                                         state=RunState.AWAITING_APPROVAL).pivot or record
        span.staged(stored)
        return stored


def stored_form(record: PivotRecord) -> PivotRecord:
    """`record` as the saga log stores it (`agentsaga.store.base.to_plan_json`: every field but
    the commit steps' arguments redacted): the plan hash is taken over this, which is what the
    operator reads back and hashes again."""
    return PivotRecord.from_json(json.loads(canonical(redact_plan(record.to_json()))))


DEFAULT_APPROVAL_TTL_S = 86400.0
"""How long after it was staged a plan may be approved when neither the AgentRun
(`spec.pivot.approvalTtlSeconds`) nor the operator (AGENTSAGA_APPROVAL_TTL_SECONDS, which it
copies into the run's policy) says: one day. The saga log's trigger (migration 019) falls back
to the same figure."""


def approval_ttl(policy: JSON | None, default: float = DEFAULT_APPROVAL_TTL_S) -> float:
    """The run's approval time-to-live in seconds: its policy's `pivot.approvalTtlSeconds`
    (the AgentRun's, as the operator copied it into the log), else `default`."""
    value = ((policy or {}).get("pivot") or {}).get("approvalTtlSeconds")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return default


def staged_age(record: PivotRecord, now: datetime) -> float | None:
    """Seconds since `record` was staged (its `stagedAt`, stamped by the saga log's clock), or
    None when it shows no time it was staged."""
    try:
        staged = datetime.fromisoformat(record.staged_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if staged.tzinfo is None:
        return None
    return (now - staged).total_seconds()


def expired(record: PivotRecord, ttl: float, now: datetime) -> bool:
    """Has `record`'s approval time-to-live passed (or does it show no staging time)?"""
    age = staged_age(record, now)
    return age is None or age > ttl


MAX_COMMIT_STEPS = 50
"""The most commit steps one plan may hold: a person reviews each one (R10)."""
MAX_REVIEW_BYTES = 256 * 1024
"""The largest plan a person is asked to review: its JSON as shown (`shown`: the steps done so
far and the commit steps' arguments, whole), as the AgentRun's status.pivot carries it. Well
within what an object in the Kubernetes API may hold (etcd stores at most 1.5 MiB of one)."""
_SHOWN_KEYS = ("step", "tool", "class", "status", "audience", "externalRef", "args",
               "argsDigest")


def shown(record: PivotRecord) -> JSON:
    """The plan as an approver (status.pivot) and the agent (ReachPivot) see it: every step,
    each commit step's arguments whole (as stored: card numbers masked to their last four,
    nothing else hidden, `agentsaga.redact.redact_plan`) with its digest, and the decision.
    Nothing is cut: a plan too large to show whole is refused at staging (`too_large`)."""
    full = record.to_json()
    out: JSON = {k: full[k] for k in ("state", "planHash", "stagedAt", "decision",
                                      "decidedBy", "decidedAt", "reason") if full.get(k)}
    out["steps"] = [_shown_step(step) for step in record.staged]
    out["commit"] = [_shown_step(step) for step in record.commit]
    return out


def _shown_step(step: JSON) -> JSON:
    return {k: step[k] for k in _SHOWN_KEYS if k in step}


def too_large(record: PivotRecord) -> str | None:
    """Why `record` is too large for a person to review (over MAX_COMMIT_STEPS commit steps, or
    over MAX_REVIEW_BYTES as shown), or None."""
    if len(record.commit) > MAX_COMMIT_STEPS:
        return (f"the plan has {len(record.commit)} commit steps; a person reviews at most "
                f"{MAX_COMMIT_STEPS} in one plan")
    size = len(canonical(redact_plan(shown(record))).encode())
    if size > MAX_REVIEW_BYTES:
        return (f"the plan is {size} bytes as a person reviews it (the steps done so far and "
                f"the commit steps' arguments, whole); the limit is {MAX_REVIEW_BYTES} bytes")
    return None


def record_decision(saga_log: OperatorStore, run_id: str, plan_hash_: str, decision: str,
                    approver: str, reason: str = "", *, ttl: float | None = None,
                    now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> PivotRecord:
    """Record a human decision on the staged plan, once, if the hash is the staged one.

    The one validation of a pivot decision: `kubectl patch` (through the operator,
    `agentsaga.operator.approval`) and `agentsaga approve` both come here, so both refuse with
    the same words. `InvalidDecision` for a decision that is neither Approved nor Rejected or
    names no approver; `ApprovalExpired` for an approval of a plan staged more than `ttl`
    seconds before `now` (None: the run's own, `approval_ttl`; a rejection is never too late);
    `PivotError` for one that does not fit the run (no plan awaiting approval, a stale plan
    hash, a plan changed since it was staged, a shown argument its digest does not match).
    """
    with telemetry.pivot_decision_span(saga_log, run_id, plan_hash_) as span:
        if decision not in (PivotState.APPROVED, PivotState.REJECTED):
            raise InvalidDecision(f"decision {decision!r}: use Approved or Rejected")
        if not approver:
            raise InvalidDecision("the approval names no approver")
        run = saga_log.require_run(run_id)
        current = run.pivot
        if current is None or current.state != PivotState.AWAITING_APPROVAL:
            state = "no staged plan" if current is None else current.state
            raise PivotError(f"run {run_id!r} is not awaiting approval ({state})")
        if current.plan_hash != plan_hash_:
            raise PivotError(
                f"stale approval: plan hash {plan_hash_!r} is not the staged plan "
                f"{current.plan_hash!r}; review the staged plan and approve its hash")
        if plan_hash(current.staged, current.commit) != current.plan_hash:
            raise PivotError(
                f"run {run_id!r}: the stored plan does not hash to its planHash (it was changed "
                "after it was staged); nothing was recorded. Stage the plan again.")
        mismatch = shown_mismatch(current)
        if mismatch is not None:
            raise PivotError(
                f"run {run_id!r}: commit step {mismatch} is shown with arguments that are not "
                "the ones its digest (argsDigest) admits, so approving it would run something "
                "other than what is shown; nothing was recorded. Reject the plan.")
        if decision == PivotState.APPROVED:
            _check_fresh(run_id, current, approval_ttl(run.policy) if ttl is None else ttl,
                         now())
        verdict = PivotState(decision)
        decided = current.deciding(verdict, approver, _now(), reason)
        if not saga_log.decide_pivot(run_id, decided, RUN_STATE_AFTER_DECISION[verdict]):
            raise PivotError(f"run {run_id!r}: the plan changed or was decided meanwhile; "
                             "nothing was recorded")
        span.decided(decided)
        return decided


_MASKED = re.compile(r"\[card \*{4}[0-9]{4}( #[0-9a-f]+)?\]|\ufffd")


def shown_mismatch(record: PivotRecord) -> int | None:
    """The first commit step whose shown arguments, holding nothing masked, do not digest to
    its `argsDigest` (the shown and the admitted arguments disagree), else None. A step with a
    masked card number cannot be checked here (the number is not stored); its call is admitted
    only if its arguments mask to the ones shown (`admit`)."""
    for index, step in enumerate(record.commit):
        args = step.get("args")
        if not isinstance(args, dict) or _MASKED.search(json.dumps(args, ensure_ascii=False)):
            continue
        if args_digest(args, record.digest_key) != step.get("argsDigest"):
            return index
    return None


def _check_fresh(run_id: str, record: PivotRecord, ttl: float, now: datetime) -> None:
    age = staged_age(record, now)
    if age is not None and age <= ttl:
        return
    since = (f"was staged at {record.staged_at}, {age:.0f}s ago" if age is not None
             else "shows no time it was staged")
    until = "" if age is None else (
        f" (it could be approved until "
        f"{_iso(now - timedelta(seconds=age) + timedelta(seconds=ttl))})")
    raise ApprovalExpired(
        f"approval of plan {record.plan_hash} refused: the plan {since}, longer ago than its "
        f"approval time-to-live of {ttl:g}s (spec.pivot.approvalTtlSeconds){until}; nothing "
        "was recorded. Approve again once the agent has staged the plan again (ReachPivot: "
        "status.pivot.stagedAt then shows the new time, and the plan hash stays the same if "
        "nothing changed); review it first. Or reject it.")


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def recorded_as(record: PivotRecord | None, plan_hash_: str, decision: str,
                approver: str) -> bool:
    """Is `record` this very decision (the same plan, verdict and approver)? A decision sent
    again after it was recorded, by a writer that stopped before it could say so, is this."""
    return record is not None and (record.plan_hash, record.decision, record.decided_by) == (
        plan_hash_, decision, approver)


READY_S = 5.0
"""How long a wait waits for the LISTEN connection before its first read (a connection slow to
come wakes it when it does)."""
RECHECK_S = 30.0
"""A wait reads its run this often even when no decision was announced: whatever befell the
announcement, a decision is seen within this."""
GONE_CHECK_S = 0.5
"""How often a wait asks whether its caller is gone (no read of the log)."""


def await_decision(saga_log: SidecarStore, run_id: str, timeout: float, *,
                   gone: Callable[[], bool] = lambda: False,
                   recheck_s: float = RECHECK_S) -> PivotRecord | None:
    """Block until the staged plan is decided, `timeout` passes or the caller is `gone`;
    returns the pivot record (None when the run has staged none). The decision is delivered
    by its announcement (LISTEN, `agentsaga.store.decisions`), not by polling: the run is
    read once the LISTEN is in place (so a decision recorded before is seen), again each time
    a decision of its plan is announced, every `recheck_s` seconds besides, and at the end."""
    if timeout <= 0:
        return saga_log.require_run(run_id).pivot
    deadline = time.monotonic() + timeout
    with saga_log.watch_decisions() as watch:
        with waiting():
            watch.wait_listening(min(timeout, READY_S))
        while True:
            watch.rearm()
            record = saga_log.require_run(run_id).pivot
            read_at = time.monotonic()
            watch.plan_hash = "" if record is None else record.plan_hash
            if (record is not None and record.decided) or read_at >= deadline or gone():
                return record
            _until_woken(watch, gone, min(deadline, read_at + recheck_s))


def _until_woken(watch: Watch, gone: Callable[[], bool], until: float) -> None:
    """Wait for `watch` to be woken, until the monotonic time `until` or the caller is gone."""
    with waiting():
        while (left := until - time.monotonic()) > 0 and not gone():
            if watch.woken(min(GONE_CHECK_S, left)):
                return


def _now() -> str:
    return _iso(datetime.now(UTC))
