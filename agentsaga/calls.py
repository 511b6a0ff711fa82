"""The typed inputs and outputs of the saga service (`agentsaga.service.saga_service`), shared by
every front end (gRPC, MCP) and by the interceptors that wrap the service (telemetry)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentsaga.redact import redact_text
from agentsaga.states import DispatchOutcome, RunState

if TYPE_CHECKING:  # annotations only: the agent's side imports no database driver
    from agentsaga.store.records import Run, Step

JSON = dict[str, Any]


@dataclass(frozen=True)
class DispatchCall:
    run_id: str
    tool: str
    args: JSON
    tool_class: str = ""
    """The tool's class when it is registered ('' otherwise), for whoever observes the call."""


@dataclass(frozen=True)
class DispatchResult:
    outcome: DispatchOutcome
    step_idx: int = -1
    key: str = ""
    result: Any = None
    external_ref: str | None = None
    message: str = ""
    status: str = ""
    """The saga-log row's status after the call ('' when no row was touched)."""
    retry_after_s: float | None = None
    """UNKNOWN: seconds until reconcile can be certain whether it happened (R7); None when
    only a human can tell."""

    def __post_init__(self) -> None:
        # the message quotes what a tool or a real system said: masked once, here, for every
        # front end and span that carries it (`agentsaga.redact`); a call that simply happened
        # says nothing (its eleven patterns would find nothing in "")
        if self.message:
            object.__setattr__(self, "message", redact_text(self.message))


@dataclass(frozen=True)
class EndRunCall:
    run_id: str
    state: RunState


@dataclass(frozen=True)
class BeganRun:
    run: Run
    adopted: bool
    """True when the run existed and this process took it over (its epoch was bumped)."""
    next_step: int


@dataclass(frozen=True)
class RunView:
    run: Run
    steps: list[Step]


@dataclass(frozen=True)
class ToolInfo:
    name: str
    tool_class: str
    description: str
    has_lookup: bool
    has_compensation: bool
    input_schema: JSON = field(default_factory=dict)
    """The JSON Schema of its arguments (`agentsaga.saga.tool_schema`)."""

    @property
    def read_only(self) -> bool:
        """A pure tool changes nothing (MCP's readOnlyHint)."""
        return self.tool_class == "pure"


class Interceptor:
    """Wraps service calls (Temporal's interceptors are the model): override a method, do
    something around `proceed(call)`, return its answer. The base passes everything through."""

    def dispatch(self, call: DispatchCall,
                 proceed: Callable[[DispatchCall], DispatchResult]) -> DispatchResult:
        return proceed(call)

    def end_run(self, call: EndRunCall, proceed: Callable[[EndRunCall], Run]) -> Run:
        return proceed(call)
