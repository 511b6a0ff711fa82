"""The operator's view of the runs it binds (`agentsaga.operator.run_walk`), those of a
namespace (a run outside Kubernetes has no AgentRun to bind): the open runs in batches, in
run-id order (the bounded resync walks them a batch at a time), and the runs changed in the
last seconds (those whose notification may have been missed between two LISTEN
connections)."""

from __future__ import annotations

from agentsaga.store.base import StoreBase
from agentsaga.store.records import RUN_COLUMNS, Run, run_from_row


class OpenRunStatements(StoreBase):
    def open_runs(self, after: str, limit: int) -> list[Run]:
        """Up to `limit` unfinished runs of a namespace whose id sorts after `after`, in id
        order."""
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM saga_runs WHERE ended_at IS NULL AND run_id > %s"
                " AND namespace <> '' ORDER BY run_id LIMIT %s", (after, limit)).fetchall()
        return [run_from_row(r) for r in rows]

    def runs_changed_since(self, seconds: float) -> list[Run]:
        """Runs of a namespace changed (begun, adopted, ended, decided) in the last `seconds`,
        oldest first."""
        with self.db.connection() as conn:
            rows = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM saga_runs WHERE namespace <> ''"
                " AND updated_at > now() - make_interval(secs => %s) ORDER BY updated_at",
                (seconds,)).fetchall()
        return [run_from_row(r) for r in rows]
