"""The saga log in Postgres (R2, R11, R12): the log, not the transcript, is the truth.

Public methods own their transaction; every write checks the run's owner epoch
(`agentsaga.store.fencing`), so a writer whose epoch was bumped by an adopter is refused
(`Fenced`). A database that goes away is `LogUnavailable`, never a psycopg error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager

from agentsaga.store import roles, schema
from agentsaga.store.connections import Database, describe
from agentsaga.store.correction_rows import CorrectionStatements
from agentsaga.store.counts import CountStatements
from agentsaga.store.cursors import Cursors
from agentsaga.store.decisions import DecisionListener, Watch
from agentsaga.store.fingerprints import FingerprintStatements
from agentsaga.store.group_commit import GroupCommit
from agentsaga.store.hooks import NoHooks, StoreHooks
from agentsaga.store.open_runs import OpenRunStatements
from agentsaga.store.retention import RetentionStatements
from agentsaga.store.runs import RunStatements
from agentsaga.store.settlements import SettlementStatements
from agentsaga.store.steps import StepStatements
from agentsaga.store.timing import TimingStatements
from agentsaga.store.waits import WaitStatements

logger = logging.getLogger(__name__)


class SagaLog(RunStatements, StepStatements, TimingStatements, CorrectionStatements,
              CountStatements, WaitStatements, SettlementStatements, RetentionStatements,
              FingerprintStatements, OpenRunStatements):
    """The saga log of one database. Thread-safe; share one per process. `hooks` hear of every
    outcome, compensation and correction (telemetry installs its own). Outcomes commit without
    waiting for the WAL flush with `async_outcomes`; `group_outcomes` also writes concurrent
    dispatches' outcomes in batches (`AGENTSAGA_OUTCOME_COMMIT`: sync, async, group)."""

    def __init__(self, dsn: str, *, min_size: int = 2, max_size: int = 16,
                 async_outcomes: bool = True, group_outcomes: bool = False,
                 hooks: StoreHooks | None = None) -> None:
        self.dsn = dsn
        self.async_outcomes = async_outcomes or group_outcomes
        # Every statement is prepared on first use (the hot path is a handful of statements).
        self.db = Database(dsn, min_size=min_size, max_size=max_size,
                           async_outcomes=self.async_outcomes)
        # Dispatches' outcomes written in batches, each answered once its batch committed
        # (`agentsaga.store.group_commit`); None: each outcome its own statement.
        self.group_commit = GroupCommit(self.write_outcomes) if group_outcomes else None
        self.hooks = hooks if hooks is not None else NoHooks()
        # The newest step of each run this process writes, as of its own last write (R12: any
        # other writer bumps the epoch first, so a cursor is used only under the epoch it was
        # read with, and the fenced write still refuses a stale one). See `cursor`.
        self._cursors = Cursors()
        # one LISTEN connection for every wait for a pivot decision, opened by the first
        self._decisions = DecisionListener(dsn)

    def open(self, *, migrate: bool = True, timeout: float = 30.0) -> SagaLog:
        """Wait up to `timeout` seconds for Postgres (it may still be starting), then open the
        pools and apply missing migrations; `DatabaseUnavailable` says why it could not."""
        self.db.open(timeout)
        if migrate:
            self.migrate()
        return self

    def close(self) -> None:
        self._decisions.close()
        self.db.close()

    def __enter__(self) -> SagaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def watch_decisions(self) -> AbstractContextManager[Watch]:
        """While a wait for a pivot decision lasts: a `Watch` woken when a decision of the plan
        it awaits is recorded (`agentsaga.store.decisions`); the wait then reads its run."""
        return self._decisions.watch()

    def reconnect(self) -> None:
        """Drop connections to a server that restarted; the next statement reconnects."""
        self.db.check()

    def migrate(self, namespaces: Mapping[str, Mapping[str, str]] | None = None,
                limits: roles.TenantLimits = roles.DEFAULT_LIMITS) -> list[str]:
        """Apply missing migrations and the roles' privileges and tenant `limits`
        (`agentsaga.store.roles`), and provision each agent namespace's credentials
        (namespace -> kind -> password, or {}): the migration role's work, never a
        sidecar's."""
        with self.db.connection() as conn:
            conn.prepare_threshold = None  # migration files hold many statements
            try:
                applied = schema.migrate(conn, namespaces, limits)
            finally:
                conn.prepare_threshold = 0
        for name in applied:
            logger.info("applied migration %s", name)
        return applied

    def require_schema(self, where: str | None = None) -> None:
        """For a command that only reads or decides: ConfigurationError, naming the database
        (`where`, else its host and name) and `agentsaga migrate`, unless the schema is there
        and current. Reads only: it never creates a table in a database that is not ours."""
        with self.db.connection() as conn:
            missing = schema.pending(conn)
        if missing:
            raise schema.missing_schema(where or describe(self.dsn), missing)
