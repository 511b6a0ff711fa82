"""Card numbers and secrets planted in a run's arguments, and the checks that none of them
reached a place that stores or exports (the saga log's tables, an AgentRun, a span).

`PLANTED` holds every form the masking must catch: card numbers with dots, slashes, spaces, NBSP,
dashes, full-width digits, written together, of 13 to 19 digits (all Luhn-valid), and
secret-looking values (`sk_live_…`, `Bearer …`, `password=…`, a PEM private key, a DSN's
password, a JSON Web Token, AWS access and secret keys, GitHub tokens, and the values of the
`X-Api-Key`, `Cookie`, `Set-Cookie` and `Authorization` headers in any case). `leaks(text)`
names those whose clear value is in `text`: a card is found by its digits but the last four in
any layout (full-width digits read as ASCII, separators dropped), a secret by a piece of it.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

CARDS = {
    "dots": "4242.4242.4242.4242",
    "slashes": "5555/5555/5555/4444",
    "nbsp": "4000\u00a00566\u00a05566\u00a05556",
    "full_width": "\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12\uff14\uff12"
                  "\uff14\uff12\uff14\uff12",
    "spaces": "3782 822463 10005",  # Amex 4-6-5, 15 digits
    "dashes": "6011-1111-1111-1117",
    "together": "4111111111111111",
    "thirteen": "4222222222222",
    "nineteen": "6221 2600 0000 0000 019",
}
SECRETS = {
    "stripe": "sk_live_51HxYzAbCdEfGhIjKlMnOp",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.abc.def",
    "password": "password=hunter2",
    "pem": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----",
    "dsn": "postgresql://agent:Dsn-Pa55w0rd@db.internal:5432/saga",
    "jwt": "id_token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJkYW5hIn0.SflKxwRJSMeKKF2QT4fwpM",
    "aws_key": "AKIAQWERTYUIOPASDFGH",
    "aws_secret": "aws_secret_access_key=wJalrXUtnFEMIK7MDENGbPxRfiCYzAwsSecret9",
    "github": "ghp_GithubTok3nAbCdEfGhIjKlMnOpQrStUvWx",
    "github_pat": "github_pat_11AAPAT0000FineGrained_ZyXwVuTsRqPoNmLkJi",
    "github_app": "ghs_AppServerTok3nAbCdEfGhIjKlMnOpQrStU",
    "github_oauth": "gho_OauthTok3nAbCdEfGhIjKlMnOpQrStUvWxY",
    "api_key_header": "X-Api-Key: hdr-apikey-7Q2w9E",
    "cookie_header": "cookie: session=ck-sess-4R8t1Y; theme=dark",
    "set_cookie_header": "Set-Cookie: sid=setck-5T9y2U; HttpOnly",
    "authorization_header": "AUTHORIZATION: Digest username=az-dgst-6Y1u3I",
}
PLANTED = {**CARDS, **SECRETS}
SECRET_PIECES = {"stripe": "51HxYzAbCdEf", "bearer": "eyJhbGciOiJIUzI1NiJ9",
                 "password": "hunter2", "pem": "MIIEvQIBADANBg", "dsn": "Dsn-Pa55w0rd",
                 "jwt": "eyJzdWIiOiJkYW5hIn0", "aws_key": "QWERTYUIOPASDFGH",
                 "aws_secret": "wJalrXUtnFEMIK7MDENG", "github": "GithubTok3n",
                 "github_pat": "FineGrained_ZyX", "github_app": "AppServerTok3n",
                 "github_oauth": "OauthTok3n", "api_key_header": "hdr-apikey-7Q2w9E",
                 "cookie_header": "ck-sess-4R8t1Y", "set_cookie_header": "setck-5T9y2U",
                 "authorization_header": "az-dgst-6Y1u3I"}

_FULL_WIDTH = str.maketrans({chr(0xFF10 + d): str(d) for d in range(10)})
_SEPARATORS = str.maketrans("", "", " \u00a0\u2007\u2009\u202f\u3000./-")


def planted_text() -> str:
    """Every planted value in one text, each after its label."""
    return " ".join(f"{label}: {value}" for label, value in PLANTED.items())


def _digits(card: str) -> str:
    return "".join(ch for ch in card.translate(_FULL_WIDTH) if ch.isdigit())


_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})|\\_")


def _unescaped(text: str) -> str:
    """JSON's `\\uXXXX`, Python's and YAML's `\\xXX` and YAML's `\\_` (no-break space) read
    as the characters they stand for."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16))
                       if m.group(1) or m.group(2) else "\u00a0", text)


def leaks(text: str) -> list[str]:
    """The labels of the planted values whose clear value `text` holds (escaped or not)."""
    text = _unescaped(text)
    flat = text.translate(_FULL_WIDTH).translate(_SEPARATORS)
    found = [label for label, card in CARDS.items() if _digits(card)[:-4] in flat]
    return found + [label for label, piece in SECRET_PIECES.items() if piece in text]


SAGA_TABLES = """
SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
 WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')
   AND table_name NOT LIKE 'ledger%' ORDER BY 1"""
"""Every table of the database but the test tools' own ground truth (`ledger*`)."""


def every_row(dsn: str, *, plans: bool = True) -> dict[str, str]:
    """Each table of the saga log's database (not the ledger's) as text, a row a line;
    without `plans`, `saga_runs` without its staged plan (`pivot`: its commit steps' arguments
    are shown whole, with only card numbers masked; `plan_leaks` checks it)."""
    with psycopg.connect(dsn) as conn:
        tables = [str(name) for (name,) in conn.execute(SAGA_TABLES).fetchall()]
        return {table: "\n".join(str(row) for (row,) in conn.execute(
            f"SELECT t::text FROM {table} t" if plans or table != "public.saga_runs"  # noqa: S608
            else "SELECT (to_jsonb(t) - 'pivot')::text FROM saga_runs t").fetchall())
            for table in tables}


def plan_leaks(text: str) -> list[str]:
    """What a staged plan's text holds in clear, checked to be what R10 allows: the approver
    sees the commit steps' arguments whole (a secret the email would carry included), never a
    card number."""
    found = leaks(text)
    assert not [label for label in found if label in CARDS], f"a card number in a plan: {found}"
    return found


def span_text(span: Any) -> str:
    """Everything an OTLP span carries that a backend would store: name, status, attributes,
    events and links' attributes, values as their text (not protobuf's escaped text format)."""
    parts = [span.name, span.status.message]
    parts += [_attribute(a) for a in span.attributes]
    for event in span.events:
        parts += [event.name] + [_attribute(a) for a in event.attributes]
    for link in span.links:
        parts += [_attribute(a) for a in link.attributes]
    return "\n".join(parts)


def _attribute(key_value: Any) -> str:
    return f"{key_value.key}={_value(key_value.value)}"


def _value(any_value: Any) -> str:
    """An OTLP AnyValue as text: strings as they are, arrays and maps element by element."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return ""
    if kind == "array_value":
        return " ".join(_value(v) for v in any_value.array_value.values)
    if kind == "kvlist_value":
        return " ".join(_attribute(kv) for kv in any_value.kvlist_value.values)
    if kind == "bytes_value":
        return bytes(any_value.bytes_value).decode(errors="replace")
    return str(getattr(any_value, kind))
