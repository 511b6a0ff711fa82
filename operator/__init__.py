"""The agentsaga operator (kopf). Importing this package registers its handlers:

    runs        the AgentRun lifecycle: a resync loop per run against the saga log and its pod
    pods        agent pods: eviction, deletion or failure of a run's pod orphans the run
    orphans     past the grace period, the reconcile/unwind Job; its progress and result
    approval    the pivot approval a human patches into status.approval (R10)
    corrections a correction's approval in status.corrections.<step>.approval (R9)
    finalizer   no deletion while the run has unsettled rows (or until force-delete)
    injection   the sidecar-injection mutating webhook
    settings    kopf's settings (finalizer, annotation prefix, peering, webhook server)

Run it with `agentsaga operator` (`agentsaga.operator.main`).
"""

from agentsaga.operator import (  # noqa: F401
    approval,
    corrections,
    finalizer,
    injection,
    orphans,
    pods,
    runs,
    settings,
)
