"""Stripe's wire shapes for the stand-in: the error object, the idempotency policy (Stripe's exact
messages), and coercion of form parameters."""

from __future__ import annotations

import secrets
from typing import Any

from aiohttp import web

from agentsaga_lab.world.idempotency import IdempotencyPolicy, uncached

Obj = dict[str, Any]
Params = dict[str, Any]


class StripeError(Exception):
    """An error answer in Stripe's shape; `cache=False` for errors raised before execution."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        cache: bool = False,
        extra: Obj | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.cache = status, cache
        self.body: Obj = {"type": type, "message": message, **(extra or {})}
        if code:
            self.body["code"] = code
            self.body["doc_url"] = f"https://docs.stripe.com/error-codes/{code.replace('_', '-')}"
        if param:
            self.body["param"] = param


def stripe_json(status: int, body: Obj) -> web.Response:
    response = web.json_response(body, status=status)
    response.headers["Request-Id"] = "req_" + secrets.token_hex(7)
    return response


def policy_error(status: int, body: Obj) -> web.Response:
    return uncached(stripe_json(status, {"error": body}))


STRIPE_POLICY = IdempotencyPolicy(
    name="stripe",
    mismatch=lambda key: policy_error(400, {
        "type": "idempotency_error",
        "message": "Keys for idempotent requests can only be used with the same parameters they "
        f"were first used with. Try using a key other than '{key}' if you meant to execute a "
        "different request.",
    }),
    in_flight=lambda key: policy_error(409, {
        "type": "invalid_request_error",
        "code": "idempotency_key_in_use",
        "message": "There is currently another in-progress request using this Idempotent Key "
        "(that probably means you submitted twice, and the other request is still going "
        f"through): {key}. Please try again later.",
    }),
    invalid_key=lambda key: policy_error(400, {
        "type": "invalid_request_error",
        "message": "Invalid idempotency key: keys can be at most 255 characters long.",
    }),
    headers=lambda key, replayed: (
        {"Idempotency-Key": key, "Idempotent-Replayed": "true"}
        if replayed else {"Idempotency-Key": key}
    ),
)


def int_param(params: Params, name: str, *, required: bool = False) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        if required:
            raise StripeError(400, f"Missing required param: {name}.", code="parameter_missing",
                              param=name)
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise StripeError(400, f"Invalid integer: {raw}", code="parameter_invalid_integer",
                          param=name) from None


def metadata_param(params: Params) -> dict[str, str]:
    raw = params.get("metadata") or {}
    if not isinstance(raw, dict):
        raise StripeError(400, "Invalid metadata: must be an object.", param="metadata")
    if len(raw) > 50 or any(len(k) > 40 or len(str(v)) > 500 for k, v in raw.items()):
        raise StripeError(400, "Invalid metadata: at most 50 keys, keys up to 40 characters and "
                          "values up to 500 characters.", param="metadata")
    return {str(k): str(v) for k, v in raw.items()}


def true_param(params: Params, name: str) -> bool:
    return str(params.get(name, "")).lower() == "true"
