"""Every input a person writes into an AgentRun's status with `kubectl patch --subresource=status`
(the pivot approval, a correction's approval, a step's settlement) takes one path:

    1. read the AgentRun (gone: nothing to do; no saga log: nothing can be recorded)
    2. the trust check, first and for every kind: the API server must bind the person's name
       to the requesting user (`approval_trust`), else nothing is recorded
    3. the run must be of the AgentRun's own namespace
    4. the core's validator, which records the input in the saga log once or refuses it
       (a `DecisionError`, or `RunNotFound` for a run the log does not hold: nothing recorded);
       its words reach the status as they are
    5. the status patch, a pure function of the newest object and the outcome, written only
       while the entry is still the one that was judged (a newer one has its own event)
    6. what follows a recorded input (a Job to start)

A kind of input is a `HumanInput`: which status field, whose name the trust check guards, the
record step (the core's validator) and the pure patch. Its own module declares it and calls
`watch`, which registers the kopf handler; nothing else changes for a new kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import kopf

from agentsaga.errors import DecisionError, RunNotFound, SagaError
from agentsaga.operator import approval_trust
from agentsaga.operator.config import AGENTRUNS
from agentsaga.operator.context import Context, context
from agentsaga.operator.run_binding import same_namespace
from agentsaga.operator.status import Obj, run_id, stamp
from agentsaga.store.interfaces import OperatorStore

T = TypeVar("T")

SINGLE = ""
"""The key of a kind that holds one entry (`status.approval`), not one per step."""

OTHER_NAMESPACE = "RunInOtherNamespace"
OTHER_NAMESPACE_MESSAGE = ("spec.runId names a run of another namespace; an AgentRun decides "
                           "only runs of its own namespace. Nothing was recorded.")


@dataclass(frozen=True)
class Recorded(Generic[T]):
    """The core recorded the input: `value` is what it returned (the decided record); `at`,
    when the operator handled it (the status's timestamp)."""

    value: T
    at: str


@dataclass(frozen=True)
class Refused:
    """Nothing was recorded. `reason`: `approval_trust.REASON` when the name cannot be trusted,
    `OTHER_NAMESPACE`, else what the kind's `refusal_reason` made of the core's error;
    `detail`: why, in the core's (or the trust check's) own words."""

    reason: str
    detail: str


Outcome = Recorded[T] | Refused
Record = Callable[[OperatorStore, Obj, str, Obj], T]
"""(saga log, the AgentRun as read, key, entry) -> what the core recorded; raises
`DecisionError` or `RunNotFound` (nothing recorded)."""
Patch = Callable[[Obj, str, Obj, "Outcome[T]"], Obj]
"""(the newest AgentRun, key, entry, outcome) -> its status patch. Pure."""
Then = Callable[[Context, Obj, str, Obj, "Outcome[T]"], None]
"""(context, the AgentRun as written, key, entry, outcome): what follows the write."""


def _nothing_follows(ctx: Context, run: Obj, key: str, entry: Obj, outcome: Outcome[Any]) -> None:
    return None


def _refused(exc: SagaError) -> str:
    return "Refused"


def _any_entry(entry: Obj) -> bool:
    return True


@dataclass(frozen=True)
class HumanInput(Generic[T]):
    """One kind of input a person writes into `status.<field>`."""

    field: str
    """The status field: `approval` (one entry), or `corrections`/`settlements` (an entry per
    step number, `keyed`)."""
    handler_id: str
    """kopf's id for the handler (kept stable: kopf records its progress under it)."""
    guarded_name: str
    """The name field the admission policy must bind to the requester (`approval_trust`)."""
    record: Record[T]
    patch: Patch[T]
    then: Then[T] = _nothing_follows
    keyed: bool = False
    entry_of: Callable[[Obj], Obj | None] = lambda entry: entry
    """The input inside a keyed entry (a correction's `approval`); the entry itself else."""
    waiting: Callable[[Obj], bool] = _any_entry
    """Whether an input still waits to be handled (a settlement not marked Recorded yet)."""
    refusal_reason: Callable[[SagaError], str] = _refused

    def waiting_at(self, value: Any, key: str) -> Obj | None:
        """The input that waits at `key` in the status field's `value` (None: none waits)."""
        if self.keyed:
            value = (value or {}).get(key)
            value = None if not value else self.entry_of(dict(value))
        return dict(value) if value and self.waiting(value) else None

    def current(self, run: Obj, key: str) -> Obj | None:
        """The input that waits at `key` in `run`'s status now."""
        return self.waiting_at((run.get("status") or {}).get(self.field), key)


def judge(kind: HumanInput[T], saga_log: OperatorStore, trust: str | None, run: Obj, key: str,
          entry: Obj) -> Outcome[T]:
    """Steps 2 to 4: `trust` is the trust check's answer (None: the name can be trusted)."""
    if trust is not None:
        return Refused(approval_trust.REASON, trust)
    logged = saga_log.run(run_id(run))
    if logged is not None and not same_namespace(logged, run["metadata"].get("namespace", "")):
        return Refused(OTHER_NAMESPACE, OTHER_NAMESPACE_MESSAGE)
    try:
        return Recorded(kind.record(saga_log, run, key, entry), stamp())
    except (DecisionError, RunNotFound) as exc:  # nothing was recorded
        return Refused(kind.refusal_reason(exc), str(exc))


def handle(kind: HumanInput[T], ctx: Context, namespace: str, name: str, key: str) -> None:
    """The input at `key`, as the newest AgentRun holds it, along the six steps."""
    run = ctx.kube.get_run(namespace, name)
    entry = None if run is None else kind.current(run, key)
    if run is None or entry is None or ctx.saga_log is None:
        return
    trust = approval_trust.check(ctx.kube, kind.guarded_name, run)
    outcome = judge(kind, ctx.saga_log, trust, run, key, entry)

    def mutate(current: Obj) -> Obj | None:
        if kind.current(current, key) != entry:
            return None  # consumed already, or a newer input arrived: its own event decides it
        return kind.patch(current, key, entry, outcome)

    written = ctx.kube.update_status(namespace, name, mutate)
    if written is not None:
        kind.then(ctx, written, key, entry, outcome)


def watch(kind: HumanInput[T]) -> Callable[..., None]:
    """Register the kopf handler of `status.<field>` (the event names the keys to look at; each
    input is read again from the newest object); returns it."""

    def changed(new: Any, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        if not new or namespace is None:
            return
        keys = [SINGLE] if not kind.keyed else sorted(
            str(key) for key in new if kind.waiting_at(new, str(key)) is not None)
        for key in keys:
            handle(kind, context(memo), namespace, name, key)

    changed.__name__ = changed.__qualname__ = f"{kind.field}_changed"
    kopf.on.field(*AGENTRUNS, field=f"status.{kind.field}", id=kind.handler_id)(changed)
    return changed
