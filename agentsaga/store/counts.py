"""Counts and snapshots over every run: what the metrics and the chaos campaign's invariant
checks read (the log, not a process's memory, knows what is open)."""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row

from agentsaga.states import UNSETTLED, StepStatus
from agentsaga.store.base import StoreBase
from agentsaga.store.fencing import status_in
from agentsaga.store.records import PivotRecord, decided_pivot

_UNSETTLED_SQL = status_in(tuple(sorted(UNSETTLED)))
_TABLES = (
    "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name)"
    " FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
    " AND table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1")


class CountStatements(StoreBase):
    def credential_namespace(self) -> str | None:
        """The namespace whose runs this connection's credential may see and write ('' : runs
        outside Kubernetes, bare ids); None for a role bound to none (the operator, the
        migration role, a superuser), which row-level security does not narrow that way."""
        with self.db.connection() as conn:
            row = conn.execute("SELECT agentsaga_caller_namespace()").fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def open_step_counts(self) -> dict[StepStatus, int]:
        """How many rows are INTENDED and UNKNOWN now (0 for a status with none)."""
        with self.db.connection() as conn:
            rows = conn.execute(f"SELECT status, count(*) FROM saga_log WHERE {_UNSETTLED_SQL}"
                                " GROUP BY status").fetchall()
        counts = dict.fromkeys(sorted(UNSETTLED), 0)
        counts.update({StepStatus(status): int(n) for status, n in rows})
        return counts

    def raw_rows(self, run_id_pattern: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every column of the runs whose id matches the LIKE pattern, and of their steps
        (oldest first), as dicts: for checks that read the log as data. A run's `pivot` is the
        staged plan with its recorded decision, as every reader of the log believes it."""
        with self.db.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            runs = cur.execute("SELECT * FROM saga_runs WHERE run_id LIKE %s",
                               (run_id_pattern,)).fetchall()
            steps = cur.execute("SELECT * FROM saga_log WHERE run_id LIKE %s"
                                " ORDER BY run_id, step_idx", (run_id_pattern,)).fetchall()
        for run in runs:  # the plan as believed: with the decision of the operator's role only
            if run.get("pivot") is not None:
                run["pivot"] = decided_pivot(PivotRecord.from_json(run["pivot"]),
                                             run.get("pivot_decision")).to_json()
        return runs, steps

    def every_table_text(self) -> dict[str, str]:
        """Every table of the database this role can read, as text, a row a line: what the
        chaos campaign's hostile-output scan searches for planted secrets."""
        with self.db.connection() as conn:
            tables = [str(name) for (name,) in conn.execute(_TABLES).fetchall()]
            return {table: "\n".join(str(row) for (row,) in conn.execute(
                f"SELECT t::text FROM {table} t").fetchall())  # noqa: S608
                for table in tables}
