"""Reconcile (R7): before any retry and any compensation, ask the real system by key.

The one implementation, used by dispatch (one row before a retry), the sidecar's Reconcile and
Unwind, the Jobs and the benchmark (many rows of many runs):

    an effect observed by a call ..... CONFIRMED from the observation (a call that came back
                                       after its writer was fenced), before asking anyone
    rows of tools with a lookup ...... looked up by key, `batch` keys per call of a tool's
                                       `lookup_steps` (given each row's LookupContext: the
                                       intent time, deadline and any known external id, for a
                                       consistent read), else `lookup_many`, else one
                                       `lookup` per key
    every empty answer ............... re-checked once, all together, after a single pause
                                       (a cheap second look, not the proof of absence)
    still empty, and certain ......... NOT_EXECUTED: by the database's clock the row's deadline
                                       plus its tool's visible_within_s has passed, or the step
                                       is about to be re-sent unchanged under its own key while
                                       the real system still dedupes it (`time_contract`)
    still empty, not yet certain ..... UNKNOWN, with the time it will be certain (retry after)
    found (either time) .............. CONFIRMED, with the effect's id and result
    a lookup that fails .............. UNKNOWN, with why (asked again next time)
    a tool with no lookup ............ UNKNOWN, handed to a human (`needs_human`): only a
                                       person settles it (`agentsaga settle`)
    a row another writer settled ..... reported as it now is
    NOT_EXECUTED, effect observed .... re-opened as CONFIRMED (settle_rows), so the unwind
                                       compensates it
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from agentsaga import crashpoints, telemetry
from agentsaga.saga.registry import Effect, LookupContext, Registry, ToolSpec, as_effect
from agentsaga.states import StepStatus
from agentsaga.store import Step
from agentsaga.store.interfaces import JobStore
from agentsaga.waiting import waiting

logger = logging.getLogger(__name__)

Finding = Literal["found", "found_on_recheck", "observed", "not_found", "not_yet_certain",
                  "lookup_failed", "no_lookup", "already_settled", "reopened"]
Answer = Effect | str | None
"""What a lookup said about one key: the effect, None (not found), or why it failed."""


@dataclass(frozen=True)
class Reconciled:
    step: Step
    """The row as reconcile left it."""
    finding: Finding
    detail: str = ""
    was: StepStatus | None = None
    """The row's status before."""
    certain_at: datetime | None = None
    """not_yet_certain: when an empty lookup will prove absence (the database's clock)."""
    retry_after_s: float | None = None
    """not_yet_certain: seconds from now until then."""

    @property
    def needs_human(self) -> bool:
        """The row stays UNKNOWN and no lookup can ever settle it: a person must."""
        return self.finding == "no_lookup" and self.step.status == StepStatus.UNKNOWN


@dataclass
class Reconciler:
    saga_log: JobStore  # what a reconcile may write (agentsaga.store.interfaces)
    registry: Registry
    recheck_pause_s: float = 2.0
    sleep: Callable[[float], None] = field(default=time.sleep)
    batch: int = 100

    def settle(self, step: Step, epoch: int, *, resend_same: bool = False) -> Reconciled:
        """One INTENDED/UNKNOWN row, before a retry of its step (dispatch). `resend_same`: the
        retry would send what was last sent, under the same key (then the system's own
        deduplication makes a re-send harmless while it lasts)."""
        with telemetry.reconcile_span(step=step) as span:
            [out] = self._settle_all([step], lambda _: epoch, lookup_spans=False,
                                     resend_same=resend_same)
            span.found(out)
            return out

    def settle_many(self, steps: Sequence[Step],
                    epoch: int | Mapping[str, int]) -> list[Reconciled]:
        """Many rows, in the order of `steps`; `epoch` is the writer's epoch, or one per run
        id for rows of many runs (R12)."""
        def epoch_of(step: Step) -> int:
            return epoch if isinstance(epoch, int) else epoch[step.run_id]

        with telemetry.reconcile_span(keys=len(steps)):
            return self._settle_all(steps, epoch_of, lookup_spans=True)

    def settle_rows(self, run_id: str, epoch: int) -> list[Reconciled]:
        """Every INTENDED/UNKNOWN row of one run (R11: read from the log), and every
        NOT_EXECUTED row whose effect a late call observed (re-opened)."""
        with telemetry.reconcile_span(run_id=run_id):
            steps = self.saga_log.steps(run_id)
            reopened = self.reopen_observed(run_id, epoch, steps)
            rows = [s for s in steps if not s.settled]
            return reopened + self._settle_all(rows, lambda _: epoch, lookup_spans=True)

    def reopen_observed(self, run_id: str, epoch: int,
                        steps: Sequence[Step]) -> list[Reconciled]:
        """Of `steps` (one run's), each settled NOT_EXECUTED whose effect a call observed after
        all (a late call, its own or a fenced writer's): re-opened as CONFIRMED with that
        effect. The real system's word outranks the log's: re-sent, the step would happen
        twice wherever the real system no longer dedupes its key."""
        gone = [s for s in steps if s.status == StepStatus.NOT_EXECUTED]
        seen = self.saga_log.observed_effects([s.idempotency_key for s in gone])
        out: list[Reconciled] = []
        for step in gone:
            obs = seen.get(step.idempotency_key)
            if obs is None:
                continue
            logger.warning("step %d of %s was settled NOT_EXECUTED, but a late call observed "
                           "its effect %s: re-opened", step.step_idx, run_id, obs.external_ref,
                           extra={"run_id": run_id, "step": step.step_idx, "tool": step.tool})
            updated = self.saga_log.reopen(run_id, epoch, step.step_idx,
                                           external_ref=obs.external_ref, result=obs.result)
            if updated is not None:
                out.append(Reconciled(updated, "reopened", f"observed {obs.external_ref}",
                                      was=step.status))
        return out

    # -- the one implementation ----------------------------------------------------------------

    def _settle_all(self, steps: Sequence[Step], epoch_of: Callable[[Step], int], *,
                    lookup_spans: bool, resend_same: bool = False) -> list[Reconciled]:
        done: dict[tuple[str, int], Reconciled] = {}
        lookable: list[tuple[Step, ToolSpec]] = []
        observed = self.saga_log.observed_effects(
            [s.idempotency_key for s in steps if not s.settled])
        for step in steps:
            spec = self.registry.get(step.tool) if step.tool in self.registry else None
            obs = observed.get(step.idempotency_key)
            if step.settled:
                done[_id(step)] = Reconciled(step, "already_settled", was=step.status)
            elif obs is not None:  # the real system already told a late call: believe it
                done[_id(step)] = self._settle(step, epoch_of(step),
                                               Effect(obs.external_ref, obs.result or {}),
                                               "observed")
            elif spec is None:
                done[_id(step)] = self._unknown(
                    step, epoch_of(step), "no_lookup",
                    f"tool {step.tool!r} is not registered in this process")
            elif spec.lookup is None:
                done[_id(step)] = self._unknown(
                    step, epoch_of(step), "no_lookup", no_lookup_why(step))
                if done[_id(step)].needs_human:
                    self.saga_log.ask_human(step.run_id, epoch_of(step), step.step_idx,
                                            step.idempotency_key, no_lookup_why(step))
            else:
                lookable.append((step, spec))
        first = self._round(lookable, 1, lookup_spans)
        empty = [(s, spec) for s, spec in lookable if first[s.idempotency_key] is None]
        second: dict[str, Answer] = {}
        if empty:  # search indexes lag: one re-check of every empty answer, after one pause
            logger.info("%d lookups empty, re-checking after %.1fs", len(empty),
                        self.recheck_pause_s)
            self.sleep(self.recheck_pause_s)
            second = self._round(empty, 2, lookup_spans)
        for step, _ in lookable:
            answer = first[step.idempotency_key]
            finding: Finding = "found"
            if answer is None:
                answer, finding = second[step.idempotency_key], "found_on_recheck"
            epoch = epoch_of(step)
            if isinstance(answer, Effect):
                crashpoints.reach("during_reconcile")  # found by key, the outcome not written
                done[_id(step)] = self._settle(step, epoch, answer, finding)
            elif answer is None:
                done[_id(step)] = self._absent(step, epoch, resend_same)
            else:
                done[_id(step)] = self._unknown(step, epoch, "lookup_failed", answer)
        return [done[_id(s)] for s in steps]

    def _round(self, steps: list[tuple[Step, ToolSpec]], attempt: int,
               traced: bool) -> dict[str, Answer]:
        """One round of lookups: each key's effect, None, or why its lookup failed."""
        if not steps:
            return {}
        if not traced:
            return self._lookups(steps)
        with telemetry.lookup_span(len(steps), attempt) as span:
            answers = self._lookups(steps)
            span.found(sum(isinstance(a, Effect) for a in answers.values()))
            return answers

    def _lookups(self, steps: list[tuple[Step, ToolSpec]]) -> dict[str, Answer]:
        answers: dict[str, Answer] = {}
        by_tool: dict[str, tuple[ToolSpec, list[Step]]] = {}
        for step, spec in steps:
            by_tool.setdefault(spec.name, (spec, []))[1].append(step)
        for spec, rows in by_tool.values():
            for start in range(0, len(rows), self.batch):
                chunk = [s.idempotency_key for s in rows[start:start + self.batch]]
                try:
                    with waiting():
                        answers.update(self._look_up(spec, rows[start:start + self.batch]))
                except Exception as exc:  # a lookup that fails leaves its rows UNKNOWN (R7)
                    logger.warning("lookup of %d %s keys failed: %s", len(chunk), spec.name, exc,
                                   extra={"tool": spec.name})
                    answers.update(dict.fromkeys(
                        chunk, f"lookup failed: {type(exc).__name__}: {exc}"))
        return answers

    def _look_up(self, spec: ToolSpec, rows: list[Step]) -> dict[str, Answer]:
        """Each row's effect or None: through the tool's `lookup_steps` with what the log knows
        of each row, else by key alone."""
        if spec.lookup_steps is None:
            return _look_up(spec, [s.idempotency_key for s in rows])
        hints = self.saga_log.lookup_hints([s.idempotency_key for s in rows])
        contexts = []
        for step in rows:
            hint = hints.get(step.idempotency_key)
            contexts.append(LookupContext(
                step.idempotency_key, dict(step.args), step.created_at,
                None if hint is None else hint.deadline,
                step.external_ref or (None if hint is None else hint.external_ref)))
        found = spec.lookup_steps(contexts)
        return {c.key: as_effect(found.get(c.key)) for c in contexts}

    def _absent(self, step: Step, epoch: int, resend_same: bool) -> Reconciled:
        """An empty lookup proves absence only when the time contract says so (R7)."""
        when = self.saga_log.certainty(step.run_id, step.step_idx)
        if when is None or when.absence_certain or (resend_same and when.resend_deduplicated):
            return self._settle(step, epoch, None, "not_found")
        at = when.certain_at
        detail = (f"not found by key yet; its absence is certain at {at:%Y-%m-%d %H:%M:%S} UTC "
                  f"(in {when.wait_s:.1f}s): the call's deadline plus the time its effect takes "
                  "to become visible" if at is not None else "not found by key yet")
        out = self._unknown(step, epoch, "not_yet_certain", detail)
        return Reconciled(out.step, out.finding, detail, out.was, at, when.wait_s)

    def _settle(self, step: Step, epoch: int, found: Effect | None,
                finding: Finding) -> Reconciled:
        if found is None:
            updated = self.saga_log.record_outcome(
                step.run_id, epoch, step.step_idx, StepStatus.NOT_EXECUTED,
                error="not found by key after re-check")
        else:
            updated = self.saga_log.record_outcome(
                step.run_id, epoch, step.step_idx, StepStatus.CONFIRMED, result=found.result,
                external_ref=found.ref)
        if updated is None:  # another writer settled it meanwhile: report what it decided
            current = self.saga_log.step(step.run_id, step.step_idx)
            return Reconciled(current or step, "already_settled", was=step.status)
        return Reconciled(updated, finding, was=step.status)

    def _unknown(self, step: Step, epoch: int, finding: Finding, detail: str) -> Reconciled:
        updated = self.saga_log.record_outcome(step.run_id, epoch, step.step_idx,
                                               StepStatus.UNKNOWN, error=detail)
        if updated is None:  # settled meanwhile (by a person, or another writer)
            current = self.saga_log.step(step.run_id, step.step_idx)
            return Reconciled(current or step, "already_settled", was=step.status)
        return Reconciled(updated, finding, detail, was=step.status)


def no_lookup_why(step: Step) -> str:
    """Why a person has to settle this step, and how."""
    command = settle_command(step.run_id, step.step_idx)
    return (f"tool {step.tool!r} declares no lookup: only a person can tell whether step "
            f"{step.step_idx} happened; record it with `{command}`")


def settle_command(run_id: str, step_idx: int) -> str:
    """The command that records a person's settlement of a step."""
    return (f"agentsaga settle --run {run_id} --step {step_idx} "
            "(--happened [--ref ID] | --not-happened) --reason TEXT")


def _id(step: Step) -> tuple[str, int]:
    return step.run_id, step.step_idx


def _look_up(spec: ToolSpec, keys: list[str]) -> dict[str, Answer]:
    """Each key's effect or None, through the tool's batched lookup when it has one."""
    if spec.lookup_many is not None:
        found = spec.lookup_many(keys)
        return {key: as_effect(found.get(key)) for key in keys}
    lookup = spec.lookup
    if lookup is None:
        return dict.fromkeys(keys, f"tool {spec.name!r} declares no lookup")
    return {key: as_effect(lookup(key)) for key in keys}
