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
"""

from __future__ import annotations

import logging
import os
import signal
import sys

logger = logging.getLogger(__name__)

ENV = "AGENTSAGA_CRASH_AT"


def armed(name: str) -> bool:
    """True when `AGENTSAGA_CRASH_AT` names this point."""
    raw = os.environ.get(ENV)
    if not raw:
        return False
    return name in {p.strip() for p in raw.split(",")}


def reach(name: str) -> None:
    """Die here (SIGKILL) when `AGENTSAGA_CRASH_AT` names this point; otherwise return."""
    if not armed(name):
        return
    logger.warning("crash point %s reached: killing process %d", name, os.getpid())
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)
