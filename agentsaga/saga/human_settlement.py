"""A person settles a step that no lookup can (R7): whether its effect happened, with the same
care as an approval (who, why, recorded once). The same validation serves `agentsaga settle`
and the operator's `status.settlements` (`agentsaga.operator.settlements`).

    Happened ......... the step becomes CONFIRMED, with the effect's id if the person has it:
                       an unwind compensates it, or queues its correction (R8, R9)
    NotHappened ...... the step becomes NOT_EXECUTED: the agent may run it again, under the
                       same key (R3); an unwind skips it
"""

from __future__ import annotations

from agentsaga.errors import SettlementError
from agentsaga.states import SettlementOutcome
from agentsaga.store import Settled
from agentsaga.store.interfaces import OperatorStore


def outcome(text: str) -> SettlementOutcome:
    """'Happened', 'happened', 'NotHappened', 'not-happened' ... -> the outcome."""
    word = text.strip().lower().replace("-", "").replace("_", "").replace(" ", "")
    for choice in SettlementOutcome:
        if word == choice.value.lower():
            return choice
    raise SettlementError(f"outcome {text!r}: use Happened or NotHappened")


def settle(saga_log: OperatorStore, run_id: str, step_idx: int, said: SettlementOutcome, *,
           settler: str, reason: str, ref: str | None = None,
           step_key: str | None = None) -> Settled:
    """Record a person's settlement of an UNKNOWN step, once (the same one again changes
    nothing); SettlementError says why it cannot be, and nothing is recorded then."""
    if not settler:
        raise SettlementError("the settlement names no settler")
    if not reason.strip():
        raise SettlementError("the settlement gives no reason: say how you know (a receipt, "
                              "the provider's console, a call with the customer)")
    if ref and said != SettlementOutcome.HAPPENED:
        raise SettlementError("a ref (the effect's id) goes only with Happened")
    saga_log.require_run(run_id)
    return saga_log.settle_step(run_id, step_idx, said, settler=settler, reason=reason,
                                external_ref=ref or None, step_key=step_key or None)
