"""The finalizer `agentsaga.io/finalizer`: an AgentRun whose run has unsettled rows (INTENDED or
UNKNOWN steps, intended compensations) is not deleted until they are settled (reconcile, unwind
or a human), or until a human sets the annotation `agentsaga.io/force-delete: "true"`.

Deleting the object would drop the only Kubernetes-side pointer to effects that may exist in the
world with nobody tracking them.
"""

from __future__ import annotations

from typing import Any

import kopf

from agentsaga.operator import run_facts
from agentsaga.operator.config import AGENTRUNS, FORCE_DELETE
from agentsaga.operator.context import context
from agentsaga.operator.status import Obj, generation, run_id, with_condition


@kopf.on.delete(*AGENTRUNS, id="settle-before-delete")
def settle_before_delete(body: kopf.Body, namespace: str | None, name: str, memo: Any,
                         logger: kopf.Logger, **_: Any) -> None:
    ctx = context(memo)
    if namespace is None:
        return
    run = ctx.kube.get_run(namespace, name) or dict(body)
    annotations = run["metadata"].get("annotations") or {}
    if annotations.get(FORCE_DELETE) == "true":
        logger.warning("deleting %s/%s on request (%s), settled or not", namespace, name,
                       FORCE_DELETE)
        return
    if ctx.saga_log is None:
        return
    unsettled = run_facts.facts(ctx.saga_log, run_id(run),
                                run["metadata"].get("namespace", "")).unsettled
    if not unsettled:
        return
    message = (f"deletion waits: {len(unsettled)} unsettled step(s) of run {run_id(run)}: "
               f"{run_facts.describe_unsettled(unsettled)}. Reconcile or unwind the run, or "
               f'annotate {FORCE_DELETE}="true" to delete anyway')

    def mutate(current: Obj) -> Obj | None:
        conditions = with_condition(current, "Settled", False, "UnsettledSteps", message)
        if conditions == (current.get("status") or {}).get("conditions"):
            return None
        return {"conditions": conditions, "message": message,
                "observedGeneration": generation(current)}

    ctx.kube.update_status(namespace, name, mutate)
    raise kopf.TemporaryError(message, delay=ctx.config.resync_seconds)
