"""How long things have waited, over every run: the ages the alerts watch, read from the log on
each metrics collection (the log, not a process's memory, knows what waits: other writers and
old runs too).

Each wait is one entry of `WAITS`: the label columns it returns and its SQL, returning rows of
(labels..., age in seconds). A new state to watch is one more entry; a new kind of item waiting
for a human is one more entry in `HUMAN_WAITS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentsaga.states import (
    UNSETTLED,
    CompensationStatus,
    CorrectionState,
    PivotState,
    RunState,
)
from agentsaga.states import StepStatus as S
from agentsaga.store.base import StoreBase
from agentsaga.store.fencing import status_in

QUERY_TIMEOUT_S = 2.0
"""How long a collection waits for a pooled connection (a scrape must not hang on Postgres)."""
ROW_LIMIT = 200
"""At most this many rows per wait, the oldest first: runs stuck are few, or all alike."""


@dataclass(frozen=True)
class Wait:
    labels: tuple[str, ...]
    """What each row's leading columns are (run id, tool, ...)."""
    sql: str
    """Rows of (labels..., age in seconds)."""


@dataclass(frozen=True)
class Age:
    labels: tuple[str, ...]
    seconds: float


def _age(since: str) -> str:
    return f"extract(epoch FROM now() - {since})::float8"


_STAGED_AGE = _age("(pivot->>'stagedAt')::timestamptz")

HUMAN_WAITS: dict[str, str] = {
    "correction": "SELECT run_id, min(created_at) FROM corrections"
                  f" WHERE state = '{CorrectionState.PROPOSED}' GROUP BY run_id",
    "compensation": "SELECT run_id, min(updated_at) FROM saga_log"
                    f" WHERE comp_status = '{CompensationStatus.FAILED}'"
                    f" AND status = '{S.CONFIRMED}' GROUP BY run_id",
}
"""What waits for a human, by kind: SQL returning (run_id, waiting since)."""

WAITS: dict[str, Wait] = {
    "open_step": Wait(
        ("run_id", "tool", "status"),
        f"SELECT run_id, tool, status, {_age('min(created_at)')}"
        f" FROM saga_log WHERE {status_in(tuple(sorted(UNSETTLED)))}"
        " GROUP BY run_id, tool, status"),
    "human": Wait(
        ("run_id", "kind"),
        f"SELECT run_id, kind, {_age('min(since)')} FROM ("
        + " UNION ALL ".join(f"SELECT '{kind}' AS kind, w.* FROM ({sql}) AS w(run_id, since)"
                             for kind, sql in HUMAN_WAITS.items())
        + ") AS waits GROUP BY run_id, kind"),
    "pivot_awaiting": Wait(
        ("run_id",),
        f"SELECT run_id, {_STAGED_AGE}"
        f" FROM saga_runs WHERE state = '{RunState.AWAITING_APPROVAL}'"
        f" AND pivot->>'state' = '{PivotState.AWAITING_APPROVAL}'"),
    "pivot_authorisation": Wait(
        ("run_id",),
        f"SELECT r.run_id, {_age('min(l.created_at)')}"
        " FROM saga_runs r JOIN saga_log l ON l.run_id = r.run_id"
        f" WHERE r.state = '{RunState.AWAITING_APPROVAL}' AND l.status = '{S.CONFIRMED}'"
        " AND l.result->>'capture_method' = 'manual'"
        " AND l.result->>'status' = 'requires_capture' GROUP BY r.run_id"),
}
"""What the alerts watch, by name:
    open_step            steps INTENDED or UNKNOWN: the oldest per run, tool and status
    human                items waiting for a human (HUMAN_WAITS), per run and kind
    pivot_awaiting       runs whose staged plan awaits approval: since it was staged
    pivot_authorisation  those runs holding a card authorisation (manual capture, not captured):
                         since the oldest was made (card networks expire them after ~7 days)
"""


class WaitStatements(StoreBase):
    def ping(self) -> None:
        """One round trip to the log; `LogUnavailable` when it cannot be made within
        QUERY_TIMEOUT_S."""
        with self.db.connection(timeout=QUERY_TIMEOUT_S) as conn:
            conn.execute("SELECT 1")

    def wait_ages(self, name: str) -> list[Age]:
        """The rows of WAITS[name], the oldest first (at most ROW_LIMIT)."""
        wait = WAITS[name]
        age = len(wait.labels) + 1
        with self.db.connection(timeout=QUERY_TIMEOUT_S) as conn:
            rows = conn.execute(f"SELECT * FROM ({wait.sql}) AS waiting"
                                f" ORDER BY {age} DESC LIMIT {ROW_LIMIT}").fetchall()
        return [Age(tuple(str(v) for v in row[:-1]), float(row[-1]))
                for row in rows if row[-1] is not None]
