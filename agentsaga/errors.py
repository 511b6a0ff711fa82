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
    │   ├── RunNotFound            no such run here (BeginRun first)
    │   ├── CompensationUnavailable  R6: the compensation cannot be built for these arguments
    │   ├── PermissionDenied       the run is bound to another pod; this sidecar may not serve it
    │   └── RateLimited            the run exceeds its calls per second (AGENTSAGA_MAX_CALLS_PER_S)
    │       └── RunsBounded        the namespace began or holds as many runs as Postgres allows
    ├── LogUnavailable             the saga log's Postgres went away during an operation
    │   ├── DatabaseUnavailable    ... or could not be reached at start
    │   │   └── DatabaseRefused    ... or answered and refused the DSN's role, password or
    │   │                          database (not "still starting": no wait)
    │   └── LogRefused             ... or refused a statement (read-only after a failover,
    │                              no privilege): what was done is unknown to the caller
    ├── DecisionError              a human decision that cannot be honoured; nothing recorded
    │   ├── PivotError             a stale or misplaced pivot approval, a plan not stageable
    │   │   └── InvalidDecision    ... or one that is malformed: no Approved/Rejected, no approver
    │   ├── CorrectionError        a decision on a correction that is not Proposed
    │   └── SettlementError        a human settlement of a step that cannot be recorded
    ├── Fenced                     R12: another owner adopted the run; this writer is stale
    ├── ConfigurationError         bad settings or tool configuration
    └── ToolCallError              (agentsaga.client) a tool call that did not confirm

Each class declares what a front end answers with (`error_code`, an `ErrorCode`); the gRPC
adapter (`agentsaga.sidecar.grpc_adapter`) maps each code to a gRPC status in one table.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from agentsaga.redact import redact_text


class ErrorCode(StrEnum):
    """What kind of refusal an error is, for every front end (gRPC, MCP)."""

    NOT_FOUND = "not_found"
    INVALID_ARGUMENT = "invalid_argument"
    FAILED_PRECONDITION = "failed_precondition"
    PERMISSION_DENIED = "permission_denied"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    TAKEN_OVER = "taken_over"
    UNAVAILABLE = "unavailable"
    UNKNOWN = "unknown"


class SagaError(Exception):
    """Root of every error agentsaga raises on purpose. Its message is masked when it is made
    (`agentsaga.redact`): a tool's or a real system's words quoted in it (a card number, a
    `Bearer` token) never reach a log line, a gRPC status or an MCP answer in clear."""

    error_code: ClassVar[ErrorCode] = ErrorCode.FAILED_PRECONDITION

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact_text(a) if isinstance(a, str) else a for a in args))


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
    error_code = ErrorCode.NOT_FOUND


class InvalidArguments(RequestError):
    error_code = ErrorCode.INVALID_ARGUMENT


class InvalidRunId(RequestError):
    error_code = ErrorCode.INVALID_ARGUMENT


class RunEnded(RequestError):
    pass


class RunNotFound(RequestError):
    """This process has no such run: not in the saga log at all, or (`in_log=True`) in it but
    neither begun nor adopted here. Worded once, here."""

    def __init__(self, run_id: str, *, in_log: bool = False) -> None:
        if in_log:
            message = (f"run {run_id!r} was not begun or adopted by this sidecar: BeginRun "
                       "adopts it")
        else:
            message = (f"run {run_id!r} has not begun in this saga log: BeginRun starts a run "
                       "(`agentsaga runs` lists the runs it holds)")
        super().__init__(message)
        self.run_id = run_id


class CompensationUnavailable(RequestError):
    """R6: the compensation of a compensatable step cannot be built for these arguments."""


class PermissionDenied(RequestError):
    """The run is bound to another pod, and this sidecar neither began nor adopted it."""

    error_code = ErrorCode.PERMISSION_DENIED


class RateLimited(RequestError):
    """The run made more calls per second than the sidecar allows; nothing was written.
    `retry_after_s`: when to call again, where it is known."""

    error_code = ErrorCode.RESOURCE_EXHAUSTED

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RunsBounded(RateLimited):
    """Postgres refused to begin a run: its namespace began as many runs in the window, or
    holds as many open, as its bounds allow (migration 020). Nothing was written; the message
    says which bound and when to retry (`retry_after_s`)."""


class DecisionError(SagaError):
    """A human decision (on the pivot or a correction) that cannot be honoured: a stale plan
    hash, a decision already taken, no approver. Nothing was recorded."""


class RunUnsettled(SagaError):
    """A run asked to end as Succeeded while a step's outcome is unknown; nothing changed."""


class PivotError(DecisionError):
    """A pivot request (stage, approve, reject) that cannot be honoured: a stale plan hash, a
    run not awaiting approval, an unresolved step. Nothing was recorded."""


class InvalidDecision(PivotError):
    """A pivot decision that is malformed whatever the plan: neither Approved nor Rejected, or
    naming no approver. Nothing was recorded."""


class ApprovalExpired(PivotError):
    """An approval of a plan staged longer ago than its approval time-to-live
    (`spec.pivot.approvalTtlSeconds`). Nothing was recorded."""


class CorrectionError(DecisionError):
    """A decision on a correction that is not (or no longer) Proposed. Nothing was recorded."""


class SettlementError(DecisionError):
    """A human settlement of a step that cannot be recorded: no such step, a step key that is
    not the step's, a step that is not UNKNOWN, or one settled otherwise before. Nothing was
    recorded."""


class Fenced(SagaError):
    """R12: the run was adopted by a newer owner (epoch); this writer may no longer write."""

    error_code = ErrorCode.TAKEN_OVER

    def __init__(self, run_id: str, held: int, current: int) -> None:
        super().__init__(
            f"run {run_id!r} was adopted by a newer owner (epoch {current}, this writer holds "
            f"{held}); this process may no longer write to it. Stop the agent in this pod: the "
            "run continues elsewhere."
        )
        self.run_id = run_id
        self.held = held
        self.current = current


def _first_line(cause: Exception) -> str:
    text = str(cause).strip()
    return text.splitlines()[0] if text else type(cause).__name__


class LogUnavailable(SagaError):
    """The saga log's Postgres went away during an operation (R2: no call without it)."""

    error_code = ErrorCode.UNAVAILABLE

    def __init__(self, where: str, cause: Exception, *, message: str | None = None) -> None:
        super().__init__(message or (
            f"the saga log's Postgres at {where} is unreachable ({_first_line(cause)}); "
            "nothing was called. Call again once it is back."))
        self.where = where
        self.reason = redact_text(_first_line(cause))
        """Why Postgres could not be reached, without the claim that nothing was called (a
        write after the call, such as its outcome's, is reported with this)."""


class LogRefused(LogUnavailable):
    """The saga log's Postgres answered but refused a statement (read-only after a failover,
    a missing privilege, a broken constraint): the request's outcome is UNKNOWN to the caller,
    as an effect may already have happened."""

    error_code = ErrorCode.UNKNOWN

    def __init__(self, where: str, cause: Exception) -> None:
        super().__init__(where, cause, message=(
            f"the saga log's Postgres at {where} refused a write or read "
            f"({_first_line(cause)}); the outcome of this request is unknown. Read the run "
            "(GetRun) once the database accepts writes again, before calling again."))


class DatabaseUnavailable(LogUnavailable):
    """The saga log's Postgres cannot be reached at start: no call is made without it (R2)."""

    def __init__(self, where: str, waited: float, cause: Exception, *,
                 message: str | None = None) -> None:
        super().__init__(where, cause, message=message or (
            f"cannot reach the saga log's Postgres at {where} after {waited:g}s "
            f"({_first_line(cause)}). Check AGENTSAGA_DSN (or --dsn) and that the server "
            "accepts connections; nothing was called."))
        self.waited = waited


class DatabaseRefused(DatabaseUnavailable):
    """The saga log's Postgres is up and refused the connection: its role, password or database
    is wrong or not there yet (a database `agentsaga migrate` has not prepared). Waiting would
    not help, so nothing waits for it."""

    def __init__(self, where: str, cause: Exception) -> None:
        super().__init__(where, 0.0, cause, message=(
            f"the saga log's Postgres at {where} is up but refused the connection "
            f"({_first_line(cause)}). If its roles or database are not there yet, run "
            "`agentsaga migrate` first (it creates the schema and the roles agentsaga_sidecar "
            "and agentsaga_operator); otherwise check the role, password and database name in "
            "the DSN (AGENTSAGA_DSN, AGENTSAGA_OPERATOR_DSN or --dsn). Nothing was called."))


class ConfigurationError(SagaError):
    """Settings or tool configuration that cannot work; the message says what to fix."""
