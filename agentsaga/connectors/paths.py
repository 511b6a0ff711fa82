"""One URL path segment from a value a model (or a real system) chose: every connector puts
ids and arguments into its URLs through `segment`, so that an argument never changes the path.

`quote(..., safe="")` encodes `/`, `?`, `#` and `%`, but leaves `.` alone (unreserved), and a
segment `..` or `.` is removed with the one before it by every URL normaliser (httpx
included): `issue/../admin` is `admin`. Such a segment is sent as `%2E%2E` / `%2E`, which the
server decodes to the literal id `..` in its place.
"""

from __future__ import annotations

from urllib.parse import quote


def segment(value: object) -> str:
    """`value` as one percent-encoded path segment: `/` and dot segments included."""
    encoded = quote(str(value), safe="")
    if encoded and set(encoded) == {"."}:
        return "%2E" * len(encoded)
    return encoded
