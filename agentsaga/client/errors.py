"""The agent-side errors, part of the project's one tree (`agentsaga.errors`).

    SagaError
    ├── ToolCallError           a tool call that did not confirm; `response` is the answer
    │   ├── ToolOutcomeUnknown  it may or may not have happened: do not retry with new arguments
    │   │   └── SidecarLost     the sidecar died, timed out or broke during the call
    │   ├── RunTakenOver        another owner adopted the run (R12): stop
    │   ├── ToolFailed          the real system said no; nothing happened
    │   ├── StepUnresolved      an earlier step's outcome is unknown: call that tool again first
    │   ├── ApprovalRequired    a human must approve this at the pivot
    │   └── ToolNeedsHuman      only a human can settle this step (its tool has no lookup):
    │                           stop calling it and end the turn
    └── Refused                 the sidecar answered with an error status: it refused the
        │                       request, or could not be reached outside a tool call (also a
        │                       grpc.RpcError with `code()` and `details()`)
        ├── PermissionDenied    the run is bound to another pod
        └── RateLimited         the run makes too many calls per second: slow down
"""

from __future__ import annotations

import grpc

from agentsaga import errors
from agentsaga.v1 import sidecar_pb2 as pb


class ToolCallError(errors.SagaError):
    """A tool call that did not confirm; `response` is the sidecar's answer."""

    def __init__(self, message: str, response: pb.DispatchResponse) -> None:
        super().__init__(message)
        self.response = response

    @property
    def step_idx(self) -> int:
        return self.response.step_idx

    @property
    def idempotency_key(self) -> str:
        return self.response.idempotency_key


class ToolOutcomeUnknown(ToolCallError):
    @property
    def retry_after(self) -> float | None:
        """Seconds until the harness can be certain whether the call happened (call the same
        tool again then); None when only a human can tell."""
        if self.response.HasField("retry_after_s"):
            return float(self.response.retry_after_s)
        return None


class SidecarLost(ToolOutcomeUnknown):
    """The sidecar died, timed out or broke during the call: the outcome is unknown."""


class RunTakenOver(ToolCallError, grpc.RpcError):  # type: ignore[misc]  # untyped grpc
    """Another owner adopted the run (a resumed pod, an unwind Job): this agent must stop.
    Also a grpc.RpcError with the status ABORTED."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.ABORTED

    def details(self) -> str:
        return str(self)


class ToolFailed(ToolCallError):
    pass


class StepUnresolved(ToolCallError):
    pass


class ApprovalRequired(ToolCallError):
    pass


class ToolNeedsHuman(ToolCallError):
    """The step's outcome is unknown and no lookup can settle it: a person records whether it
    happened (`agentsaga settle`, or `status.settlements` on Kubernetes). Calling the tool again
    answers the same until then: stop, and end the turn."""


class Refused(errors.RequestError, grpc.RpcError):  # type: ignore[misc]  # untyped grpc
    """The sidecar answered with an error status: a request it refused outright (unknown tool,
    bad arguments, an ended run; the message says what to fix), or it could not be reached
    outside a tool call. Also a grpc.RpcError: `code()` and `details()` as gRPC gave them."""

    def __init__(self, status: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._status = status
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._status

    def details(self) -> str:
        return self._details


class PermissionDenied(Refused, errors.PermissionDenied):
    """The run is bound to another pod; this sidecar may not serve it (BeginRun adopts)."""


class RateLimited(Refused, errors.RateLimited):
    """The run made more calls per second than the sidecar allows; nothing was written."""
