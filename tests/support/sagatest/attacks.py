"""Running an attack with a tenant's credential and judging it: an attack is statements run in
one session and one transaction (committed if none fails); it is refused when Postgres raises
a permission error (or refuses the feature, as COPY FROM under row-level security), and
harmless when it changed no row and returned nothing of another tenant (`MARKERS`). Whether
anything changed is judged on the rows themselves (`tenant_world.snapshot`), by the caller."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from sagatest import tenant_world

MARKERS = (*tenant_world.VICTIM_RUNS, tenant_world.B, "CUSTOMER-ACCT", "pod-b", "pod-x",
           "plan-of-b")
"""What only the victims' rows hold: any of them in an attacker's answer is a leak."""
REFUSALS = ("42501", "0A000")
"""insufficient_privilege (grants, row-level security, the triggers), feature_not_supported
(COPY FROM under row-level security, a trigger function called directly)."""

Statement = tuple[str, Sequence[Any]]


@dataclass
class Answer:
    refused: str = ""
    """The SQLSTATE and message of the refusal; '' when every statement ran."""
    changed: int = 0
    rows: list[Any] = field(default_factory=list)

    def leaked(self) -> list[str]:
        text = repr(self.rows)
        return [m for m in MARKERS if m in text]


def attempt(dsn: str, statements: Sequence[Statement | str]) -> Answer:
    answer = Answer()
    try:
        # a lone statement in its own transaction (ALTER SYSTEM refuses to run in a block
        # before it would refuse the role)
        with psycopg.connect(dsn, autocommit=len(statements) == 1) as conn:
            for statement in statements:
                query, params = (statement, ()) if isinstance(statement, str) else statement
                if query.startswith("COPY"):
                    answer.rows.append(_copy(conn, query))
                    continue
                cur = conn.execute(query, params)
                if cur.description is None:
                    answer.changed += max(cur.rowcount, 0)
                else:
                    answer.rows.extend(cur.fetchall())
    except psycopg.Error as exc:
        answer.refused = f"{exc.sqlstate}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return answer


def _copy(conn: psycopg.Connection[Any], query: str) -> bytes:
    with conn.cursor() as cur, cur.copy(query) as copy:
        if "FROM STDIN" in query:
            return b""
        return b"".join(bytes(chunk) for chunk in copy)


def judged(answer: Answer, *, must_refuse: bool = False) -> str:
    """'' when the attack was refused or harmless, else what it did."""
    if answer.refused:
        code = answer.refused.split(":", 1)[0]
        return "" if code in REFUSALS else f"failed for another reason: {answer.refused}"
    if must_refuse:
        return f"not refused (changed {answer.changed}, returned {answer.rows!r:.200})"
    if answer.changed:
        return f"changed {answer.changed} rows"
    leaked = answer.leaked()
    return f"returned another tenant's rows ({', '.join(leaked)})" if leaked else ""
