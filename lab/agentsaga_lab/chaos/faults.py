"""The fault kinds a campaign injects, and how a run's faults are drawn from its seed.

    kind                      what happens
    crash:after_intent        a sidecar armed with AGENTSAGA_CRASH_AT dies after the INTENDED commit
    crash:after_call          ... after the tool returned, before the outcome write
    crash:during_reconcile    ... after a lookup found the effect, before CONFIRMED is written
    crash:after_compensation  an unwind Job dies after a compensation returned, before COMPENSATED
    world:commit_then_504     the real system commits, then answers 504
    world:commit_then_reset   ... commits, then resets the connection
    world:drop_response       ... commits, then never answers (the connector times out)
    world:search_lag          ... commits, answers 504, and its search lags beyond the re-check
                              (tickets go to Jira, which takes no idempotency key: only the
                              time contract keeps a re-send from doubling the ticket)
    world:hostile_reject      the real system refuses (402), its error quoting card numbers
                              and the caller's own `Bearer` key and another API key back
                              (the hostile-output scan, `agentsaga_lab.chaos.scan`, then finds
                              none of them in clear in anything the campaign produced)
    late_confirm              the call is held; meanwhile another sidecar adopts the run, so
                              the first is fenced when its call confirms (an observation)
    sidecar_sigkill           the sidecar is SIGKILLed while a call is in flight
    job_sigkill               an unwind Job is SIGKILLed mid-way (as soon as it started)
    postgres_restart          Postgres stops hard (-m immediate) mid-run and comes back
    concurrent_dispatch       two sidecars dispatch the same step at the same moment
    zombie_pod                an evicted pod keeps calling while a Job unwinds its run
    unwind_in_flight          an unwind Job starts while a charge is held on the wire, then
                              committed: the Job waits for the call's deadline

Covered by tests rather than by this runner (the product must not depend on test stand-ins):
operator restart and operator-driven eviction (tests/e2e, against the Kubernetes API stand-in).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

STEP_FAULTS = (
    "crash:after_intent", "crash:after_call", "crash:during_reconcile",
    "world:commit_then_504", "world:commit_then_reset", "world:drop_response",
    "world:search_lag", "world:hostile_reject", "sidecar_sigkill", "postgres_restart",
    "concurrent_dispatch", "late_confirm",
)
UNWIND_FAULTS = ("crash:after_compensation", "job_sigkill", "zombie_pod", "unwind_in_flight")
FAULT_KINDS = STEP_FAULTS + UNWIND_FAULTS
NEEDS_EMBEDDED_PG = frozenset({"postgres_restart"})

# tool -> (HTTP method, path pattern) of the call that creates its effect in the world
ROUTES: dict[str, tuple[str, str]] = {
    "charge_card": ("POST", "/v1/payment_intents"),
    "create_ticket": ("POST", "/rest/api/3/issue"),
    "reship": ("POST", "/warehouse/reships"),
    "capture_payment": ("POST", "/v1/payment_intents/*/capture"),
    "send_email": ("POST", "/emails"),
}


@dataclass(frozen=True)
class PlannedFault:
    kind: str
    step: int
    """Index of the forward step it hits (-1: the unwind)."""


def draw(rng: random.Random, steps: int, ending: str, *, embedded_pg: bool) -> list[PlannedFault]:
    """One or two faults for a run: step faults on distinct steps, an unwind fault if it unwinds."""
    kinds = [k for k in STEP_FAULTS if embedded_pg or k not in NEEDS_EMBEDDED_PG]
    chosen = rng.sample(range(steps), k=min(steps, rng.choice((1, 1, 2))))
    planned = [PlannedFault(rng.choice(kinds), step) for step in sorted(chosen)]
    if ending == "unwind" and rng.random() < 0.7:
        planned.append(PlannedFault(rng.choice(UNWIND_FAULTS), -1))
    return planned
