"""What the store tells whoever listens when a row changes (metrics, span events), without
knowing who listens: the sidecar and the Jobs install telemetry's hooks; the store imports no
telemetry."""

from __future__ import annotations

from typing import Protocol

from agentsaga.states import CompensationStatus
from agentsaga.store.records import Correction, Step


class StoreHooks(Protocol):
    def on_outcome(self, step: Step) -> None:
        """A row reached a status (an outcome, a reconcile finding)."""

    def on_compensation(self, step: Step, status: CompensationStatus,
                        compensated: bool) -> None:
        """A row's compensation moved to `status`; `compensated`: the row is COMPENSATED."""

    def on_correction(self, correction: Correction) -> None:
        """A correction was recorded or changed state (its new state is in it)."""


class NoHooks:
    """Nobody listens."""

    def on_outcome(self, step: Step) -> None:
        pass

    def on_compensation(self, step: Step, status: CompensationStatus,
                        compensated: bool) -> None:
        pass

    def on_correction(self, correction: Correction) -> None:
        pass
