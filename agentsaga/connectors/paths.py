"""One URL path segment from a value a model (or a real system) chose: every connector puts
ids and arguments into its URLs through `segment` (the Stripe SDK's ids through `checked_id`),
so that an argument never changes the path.

An id that cannot be one is refused before any request (`Rejected`: nothing happened): an
empty one (`issues/` is the collection, not an issue: a GET lists, a DELETE may mean all of
them), `.` and `..` (removed with the segment before them by every URL normaliser, httpx and
many servers included: `issue/../admin` is `admin`), and one holding a `/` (a vendor that
decodes `%2F` before routing reads two segments). Anything else is sent percent-encoded whole
(`quote(..., safe="")`: `?`, `#`, `%` and spaces included).
"""

from __future__ import annotations

from urllib.parse import quote

from agentsaga.errors import Rejected


def invalid_id(value: object) -> str:
    """Why `value` cannot name one object in a URL path; '' when it can."""
    text = str(value)
    if not text.strip():
        return "it is empty"
    if text in (".", ".."):
        return f"{text!r} is a dot segment, which a URL normaliser removes"
    if "/" in text or "\\" in text:
        return "it holds a '/' or '\\', which would make it two path segments"
    return ""


def checked_id(value: object, what: str = "id") -> str:
    """`value` as an id to put into a URL path, or Rejected, before any request, saying why."""
    why = invalid_id(value)
    if why:
        raise Rejected(f"{what} {str(value)!r} cannot name an object in a URL path: {why}. "
                       f"Nothing was sent; pass the {what} the real system gave.")
    return str(value)


def segment(value: object, what: str = "id") -> str:
    """`value` as one percent-encoded path segment (`checked_id` first)."""
    return quote(checked_id(value, what), safe="")
