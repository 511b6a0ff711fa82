"""Reconcile (R7): before any retry and any compensation, ask the real system by key.

An empty lookup is re-checked once after a pause (search indexes lag); still empty means
NOT_EXECUTED. A lookup that fails, or a tool that cannot be looked up, leaves the row UNKNOWN:
only a human can settle it then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from agentsaga import crashpoints, telemetry
from agentsaga.errors import UnknownTool
from agentsaga.log import SagaLog, Step
from agentsaga.registry import Effect, Registry, ToolSpec, as_effect

log = logging.getLogger(__name__)

Finding = Literal["found", "found_on_recheck", "not_found", "lookup_failed", "no_lookup",
                  "already_settled"]


@dataclass(frozen=True)
class Reconciled:
    step: Step
    finding: Finding
    detail: str = ""


@dataclass
class Reconciler:
    log: SagaLog
    registry: Registry
    recheck_pause_s: float = 2.0
    sleep: Callable[[float], None] = field(default=time.sleep)

    @telemetry.reconcile_traced
    def settle(self, step: Step, epoch: int) -> Reconciled:
        """Settle one INTENDED/UNKNOWN row by key: CONFIRMED, NOT_EXECUTED, or left UNKNOWN."""
        if step.settled:
            return Reconciled(step, "already_settled")
        extra = {"run_id": step.run_id, "step": step.step_idx, "tool": step.tool,
                 "key": step.idempotency_key}
        try:
            spec = self.registry.get(step.tool)
        except UnknownTool:
            return self._unknown(step, epoch, "no_lookup",
                                 f"tool {step.tool!r} is not registered in this process")
        if spec.lookup is None:
            return self._unknown(step, epoch, "no_lookup",
                                 f"tool {step.tool!r} declares no lookup; a human must settle it")
        try:
            found = as_effect(spec.lookup(step.idempotency_key))
            finding: Finding = "found"
            if found is None:
                log.info("lookup empty, re-checking after %.1fs", self.recheck_pause_s, extra=extra)
                self.sleep(self.recheck_pause_s)
                found = as_effect(spec.lookup(step.idempotency_key))
                finding = "found_on_recheck"
        except Exception as exc:  # any failure of the lookup leaves the outcome unknown
            log.warning("lookup failed: %s", exc, extra=extra)
            return self._unknown(step, epoch, "lookup_failed", f"lookup failed: {exc}")
        if found is None:
            return self._settle(step, epoch, None, "not_found")
        crashpoints.reach("during_reconcile")  # found by key, the outcome not yet written
        return self._settle(step, epoch, found, finding)

    @telemetry.reconcile_traced
    def settle_many(self, steps: Sequence[Step], epoch: int | Mapping[str, int], *,
                    batch: int = 100) -> list[Reconciled]:
        """R7 for many rows at once (reconcile at scale), in the order of `steps`.

        Rows of a tool with `lookup_many` are looked up `batch` keys per call (the connector packs
        them into as few queries as its API allows, e.g. 10 OR clauses per Stripe search); every
        empty one is re-checked once, together, after a single pause. Other rows go through
        `settle`. `epoch` is the writer's epoch, or a map run id -> epoch for many runs (R12).
        """
        def epoch_of(step: Step) -> int:
            return epoch if isinstance(epoch, int) else epoch[step.run_id]

        done: dict[tuple[str, int], Reconciled] = {}
        batched: dict[str, list[Step]] = {}
        for step in steps:
            spec = self.registry.get(step.tool) if step.tool in self.registry else None
            if step.settled or spec is None or spec.lookup is None or spec.lookup_many is None:
                done[(step.run_id, step.step_idx)] = self.settle(step, epoch_of(step))
            else:
                batched.setdefault(step.tool, []).append(step)
        empty: dict[str, list[Step]] = {}
        for tool, group in batched.items():
            for step, found in self._lookup_chunks(self.registry.get(tool), group, batch):
                if isinstance(found, Effect):
                    done[(step.run_id, step.step_idx)] = self._settle(
                        step, epoch_of(step), found, "found")
                elif found is None:
                    empty.setdefault(tool, []).append(step)
                else:
                    done[(step.run_id, step.step_idx)] = self._unknown(
                        step, epoch_of(step), "lookup_failed", found)
        if empty:
            log.info("%d lookups empty, re-checking after %.1fs",
                     sum(map(len, empty.values())), self.recheck_pause_s)
            self.sleep(self.recheck_pause_s)
        for tool, group in empty.items():
            for step, found in self._lookup_chunks(self.registry.get(tool), group, batch):
                if isinstance(found, Effect):
                    outcome = self._settle(step, epoch_of(step), found, "found_on_recheck")
                elif found is None:
                    outcome = self._settle(step, epoch_of(step), None, "not_found")
                else:
                    outcome = self._unknown(step, epoch_of(step), "lookup_failed", found)
                done[(step.run_id, step.step_idx)] = outcome
        return [done[(s.run_id, s.step_idx)] for s in steps]

    def _lookup_chunks(self, spec: ToolSpec, steps: list[Step],
                       batch: int) -> list[tuple[Step, Effect | str | None]]:
        """Each step with its effect, None (not found) or why the lookup failed."""
        assert spec.lookup_many is not None
        out: list[tuple[Step, Effect | str | None]] = []
        for start in range(0, len(steps), batch):
            chunk = steps[start:start + batch]
            try:
                found = spec.lookup_many([s.idempotency_key for s in chunk])
                out += [(s, as_effect(found.get(s.idempotency_key))) for s in chunk]
            except Exception as exc:  # any failure of the lookup leaves the outcomes unknown
                log.warning("batched lookup of %d keys failed: %s", len(chunk), exc,
                            extra={"tool": spec.name})
                out += [(s, f"lookup failed: {exc}") for s in chunk]
        return out

    def _settle(self, step: Step, epoch: int, found: Effect | None, finding: Finding) -> Reconciled:
        if found is None:
            updated = self.log.record_outcome(step.run_id, epoch, step.step_idx, "NOT_EXECUTED",
                                              error="not found by key after re-check")
        else:
            updated = self.log.record_outcome(step.run_id, epoch, step.step_idx, "CONFIRMED",
                                              result=found.result, external_ref=found.ref)
        if updated is None:  # another writer settled it meanwhile: report what it decided
            current = self.log.step(step.run_id, step.step_idx)
            assert current is not None
            return Reconciled(current, "already_settled")
        return Reconciled(updated, finding)

    def _unknown(self, step: Step, epoch: int, finding: Finding, detail: str) -> Reconciled:
        updated = self.log.record_outcome(step.run_id, epoch, step.step_idx, "UNKNOWN",
                                          error=detail)
        return Reconciled(updated or step, finding, detail)
