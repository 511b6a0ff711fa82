"""metav1.Status bodies and the exception that carries them to the HTTP layer."""

from __future__ import annotations

from typing import Any

from .resources import ResourceType

REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
}


def status_body(
    code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason if reason is not None else REASONS.get(code, ""),
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


class ApiError(Exception):
    """An API failure; the server turns it into a Status response with `code`."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.body = status_body(code, message, reason, details)


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    return {"name": name, "group": rt.group, "kind": rt.plural}


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, f'{rt.describe()} "{name}" not found', "NotFound", _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, f'{rt.describe()} "{name}" already exists', "AlreadyExists", _details(rt, name)
    )


def conflict(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {rt.describe()} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        "Conflict",
        _details(rt, name),
    )


def invalid(rt: ResourceType, name: str, message: str) -> ApiError:
    return ApiError(
        422,
        f'{rt.kind}.{rt.group or "core"} "{name}" is invalid: {message}',
        "Invalid",
        _details(rt, name),
    )
