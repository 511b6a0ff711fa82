"""Errors of agentsaga, one tree under `SagaError`.

    SagaError
    ├── RegistrationError          a tool declaration breaks R1 (caught at import, in code review)
    ├── ToolError                  raised by tool functions and connectors (what happened outside)
    │   ├── Rejected               the real system said no (4xx): nothing happened -> FAILED
    │   └── OutcomeUnknown         timeout, reset after send, 502/503/504: maybe -> UNKNOWN
    ├── RequestError               a request the harness refuses before anything is written
    │   ├── UnknownTool            no tool of that name is registered
    │   ├── InvalidArguments       arguments are not a JSON object, or too large
    │   ├── InvalidRunId           empty, too long or malformed run id
    │   ├── RunEnded               the run has ended; no more calls
    │   ├── RunNotFound            no such run (BeginRun first)
    │   ├── CompensationUnavailable  R6: the compensation cannot be built for these arguments
    │   ├── PermissionDenied     the run is bound to another pod; this sidecar may not serve it
    │   └── RateLimited          the run exceeds its calls per second (AGENTSAGA_MAX_CALLS_PER_S)
    ├── DatabaseUnavailable        the saga log's Postgres cannot be reached
    ├── PivotError                 a stale or misplaced approval, a plan that cannot be staged
    ├── Fenced                     R12: another owner adopted the run; this writer is stale
    └── ConfigurationError         bad settings or tool configuration

The gRPC layer translates these once, at the edge (`agentsaga.sidecar.server`).
"""

from __future__ import annotations


class SagaError(Exception):
    """Root of every error agentsaga raises on purpose."""


class RegistrationError(SagaError):
    """A tool declaration breaks R1; the message names the tool and what to change."""


class ToolError(SagaError):
    """Raised by a tool to say what happened in the outside world."""


class Rejected(ToolError):
    """The real system refused the call (HTTP 4xx, a validation error): nothing happened."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class OutcomeUnknown(ToolError):
    """The call may or may not have taken effect (timeout, reset after send, 502/503/504)."""


class RequestError(SagaError):
    """A request refused before anything was written or called."""


class UnknownTool(RequestError):
    pass


class InvalidArguments(RequestError):
    pass


class InvalidRunId(RequestError):
    pass


class RunEnded(RequestError):
    pass


class RunNotFound(RequestError):
    """No such run in this saga log; worded once, here."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id!r} has not begun in this saga log: BeginRun starts a run "
            "(`agentsaga runs` lists the runs it holds)")
        self.run_id = run_id


class CompensationUnavailable(RequestError):
    """R6: the compensation of a compensatable step cannot be built for these arguments."""


class PermissionDenied(RequestError):
    """The run is bound to another pod, and this sidecar neither began nor adopted it."""


class RateLimited(RequestError):
    """The run made more calls per second than the sidecar allows; nothing was written."""


class PivotError(SagaError):
    """A pivot request (stage, approve, reject) that cannot be honoured: a stale plan hash, a
    run not awaiting approval, an unresolved step. Nothing was recorded."""


class Fenced(SagaError):
    """R12: the run was adopted by a newer owner (epoch); this writer may no longer write."""

    def __init__(self, run_id: str, held: int, current: int) -> None:
        super().__init__(
            f"run {run_id!r} was adopted by a newer owner (epoch {current}, this writer holds "
            f"{held}); this process may no longer write to it. Stop the agent in this pod: the "
            "run continues elsewhere."
        )
        self.run_id = run_id
        self.held = held
        self.current = current


class DatabaseUnavailable(SagaError):
    """The saga log's Postgres cannot be reached: no call is made without it (R2)."""

    def __init__(self, where: str, waited: float, cause: Exception) -> None:
        reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(
            f"cannot reach the saga log's Postgres at {where} after {waited:g}s ({reason}). "
            "Check AGENTSAGA_DSN (or --dsn) and that the server accepts connections; nothing "
            "was called.")


class ConfigurationError(SagaError):
    """Settings or tool configuration that cannot work; the message says what to fix."""
