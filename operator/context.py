"""What every handler needs, handed over through kopf's `memo` (one per operator process)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentsaga.operator.gauges import RunGauges
from agentsaga.operator.kube import KubeApi
from agentsaga.operator.log_watch import LogWatch
from agentsaga.operator.run_pods import RunsByPod
from agentsaga.settings import OperatorSettings
from agentsaga.store.interfaces import OperatorStore


@dataclass(frozen=True)
class Context:
    config: OperatorSettings
    kube: KubeApi
    saga_log: OperatorStore | None
    """The saga log as the operator's database role may use it (`OperatorStore`: its reads,
    the decisions, the run's policy and released pods)."""
    sidecar_template: dict[str, Any] | None = None
    gauges: RunGauges = field(default_factory=RunGauges)
    """What the resync passes saw, for the operator's gauges (`gauges`)."""
    log_watch: LogWatch = field(init=False)
    """The batched change-check of the unfinished runs' saga log (`log_watch`)."""
    runs_by_pod: RunsByPod = field(default_factory=RunsByPod)
    """Which AgentRuns each pod serves, from the AgentRuns' watch events (`run_pods`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "log_watch", LogWatch(
            self.saga_log, self.config.resync_seconds, self.config.resync_batch, self.gauges,
            self.config.full_resync_seconds))


def context(memo: Any) -> Context:
    found = getattr(memo, "context", None)
    if not isinstance(found, Context):
        raise RuntimeError("the operator was started without its context: use `agentsaga "
                           "operator`, which builds it")
    return found
