"""A JSON API over HTTP for the connectors (httpx), with the three outcomes of R5 decided in one
place.

    2xx ............................................ the answer
    4xx (but 409 in-flight, 429) ................... Rejected: the server said no, nothing happened
    409 "idempotency key in use" ................... OutcomeUnknown: the first try is still running
    429 ............................................ Rejected for a write (not executed); a lookup
                                                     backs off and asks again (`search`)
    5xx, timeout after connecting, reset, garbage .. OutcomeUnknown: it may have happened
    could not connect at all ....................... Rejected: the request never left this host
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from agentsaga.connectors.config import HttpSettings
from agentsaga.errors import OutcomeUnknown, Rejected
from agentsaga.redact import clip, redact_value

logger = logging.getLogger(__name__)


class SearchRateLimited(Exception):
    """A 429 from a search endpoint (internal: lookups back off and retry; not the sidecar's
    `agentsaga.errors.RateLimited`)."""


class Pacer:
    """At most `rate` requests per second from this process (Stripe search allows 20/s)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.interval = 1.0 / rate
        self._next = 0.0
        self._lock = threading.Lock()
        self._clock, self._sleep = clock, sleep

    def wait(self) -> None:
        with self._lock:
            now = self._clock()
            start = max(now, self._next)
            self._next = start + self.interval
        if start > now:
            self._sleep(start - now)


def with_backoff(call: Callable[[], Any], settings: HttpSettings, what: str, *,
                 sleep: Callable[[float], None] = time.sleep) -> Any:
    """Run a lookup, retrying after a 429 with exponential backoff; give up as OutcomeUnknown.
    `sleep` is the clock seam (a test passes its ManualClock's `advance`)."""
    delay = 0.05
    for attempt in range(settings.max_backoffs + 1):
        try:
            return call()
        except SearchRateLimited:
            if attempt == settings.max_backoffs:
                break
            logger.info("%s: rate limited, backing off %.2fs", what, delay)
            sleep(delay)
            delay = min(delay * 2, 2.0)
    raise OutcomeUnknown(f"{what}: still rate limited after {settings.max_backoffs} backoffs")


def _error_text(response: httpx.Response) -> str:
    """What the API said, masked before it is shortened (an echoed card number cut in half
    would no longer be recognised as one)."""
    try:
        body = response.json()
    except ValueError:
        return clip(response.text, 200, "").strip()
    return clip(json.dumps(redact_value(body)), 400, "")


class JsonApi:
    """One JSON API: base URL, auth and timeouts; answers or raises Rejected / OutcomeUnknown."""

    def __init__(self, name: str, base_url: str, settings: HttpSettings, *,
                 auth: tuple[str, str] | None = None, headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.name = name
        self.sleep = sleep
        """How this API waits (pacing and back-off): the clock seam, with `clock`."""
        self.settings = settings
        self.client = httpx.Client(
            base_url=base_url, auth=auth, headers=dict(headers or {}),
            timeout=httpx.Timeout(settings.timeout_s), transport=transport,
        )
        self.pacer = Pacer(settings.search_rate, clock=clock, sleep=sleep)

    def close(self) -> None:
        self.client.close()

    def call(self, method: str, path: str, *, json_body: Any = None,
             params: Mapping[str, Any] | None = None, headers: Mapping[str, str] | None = None,
             search: bool = False) -> Any:
        """One request. `search=True`: paced, and a 429 raises `SearchRateLimited` for the
        backoff."""
        what = f"{self.name} {method} {path}"
        if search:
            self.pacer.wait()
        try:
            response = self.client.request(method, path, json=json_body, params=params,
                                           headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise Rejected(f"{what}: could not connect ({type(exc).__name__}: {exc}); "
                           "nothing was sent") from exc
        except httpx.TransportError as exc:  # read/write timeouts, resets, protocol errors
            raise OutcomeUnknown(f"{what}: {type(exc).__name__} after the request was sent "
                                 f"({exc or 'no answer'})") from exc
        return self._answer(what, response, search)

    def _answer(self, what: str, response: httpx.Response, search: bool) -> Any:
        status = response.status_code
        if status == 429 and search:
            raise SearchRateLimited(what)
        if 400 <= status < 500 and "idempot" in response.text.lower():
            # the key is in flight (409) or was used before with other parameters (Zendesk's
            # 400, Resend's 409): the first request may have taken effect, so never FAILED
            raise OutcomeUnknown(f"{what}: HTTP {status}, this idempotency key was used by an "
                                 f"earlier request ({_error_text(response)[:120]})")
        if 400 <= status < 500:
            raise Rejected(f"{what}: HTTP {status}: {_error_text(response)}", status=status)
        if status >= 500:
            raise OutcomeUnknown(f"{what}: HTTP {status} ({_error_text(response)[:80]})")
        if status == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise OutcomeUnknown(f"{what}: HTTP {status} with a body that is not JSON") from exc
