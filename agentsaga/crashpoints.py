"""Named crash points: a process dies on purpose at a chosen moment (for tests and the demo).

`AGENTSAGA_CRASH_AT` names one or more points (comma-separated), e.g.
`after_call:charge_card` or `after_compensation:cancel_or_refund_payment`. When the running code
reaches a named point, the process sends itself SIGKILL: no `finally`, no flush, no goodbye, the
same as a pod eviction that does not wait. Unset, `reach` costs one dictionary lookup.

Points in the product:

    after_intent:<tool>          the INTENDED row is committed, the tool not yet called
    after_call:<tool>            the tool returned, its outcome not yet written
    after_compensation:<tool>    a compensating tool returned, DONE not yet written
    during_reconcile             a lookup found the effect by key, CONFIRMED not yet written
    after_prune_batch            `agentsaga prune` committed a batch, the next not begun
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from agentsaga.environment import load, name_of
from agentsaga.settings import DebugSettings

logger = logging.getLogger(__name__)

ENV = name_of(DebugSettings, "crash_at")


def armed(name: str) -> bool:
    """True when `AGENTSAGA_CRASH_AT` names this point (read here, not at start: the chaos
    runner and the tests arm each process through its environment)."""
    if not os.environ.get(ENV):
        return False
    return name in load(DebugSettings, os.environ).crash_at


def reach(name: str) -> None:
    """Die here (SIGKILL) when `AGENTSAGA_CRASH_AT` names this point; otherwise return."""
    if not armed(name):
        return
    logger.warning("crash point %s reached: killing process %d", name, os.getpid())
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)
