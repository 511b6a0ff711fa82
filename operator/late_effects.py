"""Effects found after the run ended (R7, R8): a step settled NOT_EXECUTED whose effect a call
observed after all. Such a call came back past its tool's declared deadline (the contract was
wrong) and after the run's unwind had finished; the step is re-opened and compensated only by
a reconcile or unwind of the run, which nothing runs once the run has ended, and the operator
keeps no daemon for a finished run.

The call's observation is announced on the runs' channel (a trigger, migrations 013 and 017),
which the operator LISTENs to; at start-up and after a lost LISTEN connection it sweeps the log
for such runs once (`SagaLog.late_effects`). For each:

    the run unwound ............ an unwind Job again: it re-opens the step as CONFIRMED and
                                 compensates it, and only it (everything else was already)
    it succeeded or failed ..... the condition LateEffect, for a person: an unwind would
                                 compensate the whole run, which may not be what is wanted;
                                 the message gives the commands
"""

from __future__ import annotations

import logging

from agentsaga.keys import split_log_run_id
from agentsaga.operator import run_jobs
from agentsaga.operator.context import Context
from agentsaga.operator.status import (
    Obj,
    agentrun_name,
    condition,
    generation,
    phase,
    run_id,
    with_condition,
)
from agentsaga.states import RunPhase, RunState

logger = logging.getLogger(__name__)

CONDITION = "LateEffect"
WHY = ("a call came back with the effect of a step the log held as never happened (it outlived "
       "its tool's declared deadline)")


def sweep(ctx: Context) -> None:
    """Every ended run of the log that owes a late effect's re-open (start-up, a lost LISTEN
    connection: a notification may have been missed)."""
    if ctx.saga_log is None:
        return
    for found in ctx.saga_log.late_effects():
        act_quietly(ctx, found)


def act_quietly(ctx: Context, log_run_id: str) -> None:
    try:
        act(ctx, log_run_id)
    except Exception as exc:  # one run's trouble never stops the others; the next sweep retries
        logger.warning("acting on a late effect of run %s: %s", log_run_id, exc)


def act(ctx: Context, log_run_id: str) -> None:
    """The run's late effect, if it has one and has ended: an unwind Job, or a condition."""
    saga_log = ctx.saga_log
    if saga_log is None:
        return
    run = saga_log.run(log_run_id)
    if run is None or run.open or not run.namespace or not saga_log.late_effects([log_run_id]):
        return
    _, bare = split_log_run_id(log_run_id)
    agentrun = ctx.kube.get_run(run.namespace, agentrun_name(bare))
    if agentrun is None or run_id(agentrun) != log_run_id:
        return
    if run.state == RunState.UNWOUND:
        logger.warning("run %s: %s; unwinding it again", log_run_id, WHY)
        run_jobs.start_job(ctx, agentrun, "unwind", frozenset({RunPhase.UNWOUND}),
                           f"{WHY}: the unwind re-opens and compensates it")
        return
    message = (f"{WHY}; the run {run.state}, so nothing undoes it on its own: "
               f"`agentsaga reconcile --run {log_run_id}` records it as CONFIRMED, "
               f"`agentsaga unwind --run {log_run_id}` compensates the whole run")

    def mutate(current: Obj) -> Obj | None:
        shown = condition(current, CONDITION)
        if shown is not None and shown.get("status") == "True" or phase(current) not in (
                RunPhase.SUCCEEDED, RunPhase.FAILED):
            return None
        return {"observedGeneration": generation(current), "message": message,
                "conditions": with_condition(current, CONDITION, True, "EffectObserved",
                                             message)}

    if ctx.kube.update_status(run.namespace, agentrun["metadata"]["name"], mutate) is not None:
        logger.warning("run %s: %s", log_run_id, message)
