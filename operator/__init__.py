"""The agentsaga operator (kopf). Importing this package registers its handlers:

    runs                 the AgentRun lifecycle: a resync daemon per unfinished run against the
                         saga log and its pod, woken by changes (finished runs have none)
    log_watch            one batched check of the unfinished runs' saga log, not a timer per run
    pods                 agent pods: eviction, deletion or failure of a run's pod orphans the run
    run_jobs             orphaned runs, and every Job that acts on a run (reconcile, unwind,
                         corrections): started once, followed to its result
    run_binding          the only writer to the Kubernetes API for runs: LISTENs to the saga log,
                         creates or adopts each run's AgentRun, binds its pod and epoch, and
                         copies the AgentRun's spec policy into the log
    late_effects         an effect a late call saw after its run ended: an unwind Job again
                         (an unwound run), or a condition for a person
    human_input          the one path of every input a person patches into the status: the
                         trust check, the core's validator, a pure status patch; the three
                         kinds below each declare their field, validator and patch
    approval             the pivot approval a human patches into status.approval (R10)
    correction_approval  a correction's approval in status.corrections.<step>.approval (R9)
    settlements          a person's settlement of a step in status.settlements.<step> (R7)
    finalizer            no deletion while the run has unsettled rows (or until force-delete)
    injection            the sidecar-injection mutating webhook
    kopf_settings        kopf's settings (finalizer, annotation prefix, peering, webhook server)

Helpers: `run_facts` (what the saga log says about a run), `job_manifests` (a Job's name and
manifest), `status`, `kube`, `config`, `context`.

Run it with `agentsaga operator` (`agentsaga.operator.main`).
"""

from agentsaga.extras import require

require("operator", "kopf", "kubernetes", "jsonpatch", what="the operator (`agentsaga operator`)")

from agentsaga.operator import (  # noqa: E402, F401
    approval,
    correction_approval,
    finalizer,
    injection,
    kopf_settings,
    pods,
    run_binding,
    run_jobs,
    runs,
    settlements,
)
