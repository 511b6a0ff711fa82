"""A run id is unique within its namespace (`namespace/run-id` in the saga log): the migration
that made it so renames the runs a saga log held before, with every row that names them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest

from agentsaga.keys import log_run_id, split_log_run_id, step_key
from agentsaga.store import SagaLog, schema
from sagatest.pg_fixtures import _with_db

BEFORE = 10
"""The last migration before runs were named by namespace."""


@pytest.fixture
def older_log(pg_server: str) -> Iterator[str]:
    """A saga log at migration 010 holding a run of namespace `payments` under its bare id (with
    a step, a correction, an attempt, an observation, a settlement) and a run outside
    Kubernetes."""
    name = f"older_{os.getpid()}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    dsn = _with_db(pg_server, name)
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INT PRIMARY KEY,"
                     " name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        for version, file, sql in schema.available():
            if version <= BEFORE:
                conn.execute(sql.encode())
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                             (version, file))
        conn.execute("INSERT INTO saga_runs (run_id, namespace, pod_uid) VALUES"
                     " ('refund-1', 'payments', 'uid-1'), ('local-1', '', '')")
        for run in ("refund-1", "local-1"):
            conn.execute(
                "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key,"
                " args, status, writer_epoch) VALUES (%s, 0, 'send_email', 'irreversible', %s,"
                " '{}', 'CONFIRMED', 1)", (run, step_key(run, 0, "send_email")))
        conn.execute("INSERT INTO corrections (run_id, step_idx, tool, audience, rank)"
                     " VALUES ('refund-1', 0, 'send_email', '{customer}', 3)")
        conn.execute("INSERT INTO saga_attempts (run_id, step_idx, attempt, args, deadline,"
                     " writer_epoch) VALUES ('refund-1', 0, 2, '{}', now(), 1)")
        conn.execute("INSERT INTO saga_observations (run_id, step_idx, idempotency_key,"
                     " outcome, writer_epoch) VALUES ('refund-1', 0, 'k', 'CONFIRMED', 1)")
        conn.execute("INSERT INTO step_settlements (run_id, step_idx, step_key)"
                     " VALUES ('refund-1', 0, 'k')")
    yield dsn
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_the_migration_renames_a_namespaces_runs_with_every_row_naming_them(
        older_log: str) -> None:
    with psycopg.connect(older_log) as conn:
        applied = schema.migrate(conn)
    assert applied[0].startswith("011_")
    with psycopg.connect(older_log) as conn:
        tables = ("saga_runs", "saga_log", "corrections", "saga_attempts", "saga_observations",
                  "step_settlements")
        named = {table: sorted(str(r[0]) for r in conn.execute(
            f"SELECT run_id FROM {table}").fetchall()) for table in tables}
    assert named == {"saga_runs": ["local-1", "payments/refund-1"],
                     "saga_log": ["local-1", "payments/refund-1"],
                     "corrections": ["payments/refund-1"],
                     "saga_attempts": ["payments/refund-1"],
                     "saga_observations": ["payments/refund-1"],
                     "step_settlements": ["payments/refund-1"]}
    with SagaLog(older_log, min_size=1, max_size=1).open(migrate=False) as saga_log:
        step = saga_log.step("payments/refund-1", 0)
        # the step keeps the key it was called under
        assert step is not None and step.idempotency_key == step_key("refund-1", 0, "send_email")
        assert saga_log.namespaces_with_run("refund-1") == ["payments"]
        assert saga_log.namespaces_with_run("local-1") == [""]


def test_the_log_refuses_a_run_id_that_does_not_say_its_namespace(pg: str) -> None:
    with SagaLog(pg, min_size=1, max_size=1).open(migrate=False) as saga_log:
        with pytest.raises(ValueError, match="'payments/refund-1'"):
            saga_log.begin_run("refund-1", namespace="payments")
        saga_log.begin_run(log_run_id("payments", "refund-1"), namespace="payments")
        saga_log.begin_run(log_run_id("sandbox", "refund-1"), namespace="sandbox")
        assert saga_log.namespaces_with_run("refund-1") == ["payments", "sandbox"]
    with psycopg.connect(pg) as conn:  # and Postgres holds the id to its namespace too
        for run_id, namespace in (("refund-2", "payments"), ("sandbox/refund-2", "payments"),
                                  ("a/b", "")):
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute("INSERT INTO saga_runs (run_id, namespace) VALUES (%s, %s)",
                             (run_id, namespace))
            conn.rollback()


@pytest.mark.parametrize(("namespace", "run_id", "log_id"), [
    ("", "refund-1", "refund-1"),
    ("payments", "refund-1", "payments/refund-1"),
    ("payments", "payments/refund-1", "payments/refund-1"),
    ("sandbox", "payments/refund-1", "sandbox/payments/refund-1"),
])
def test_log_ids_say_their_namespace(namespace: str, run_id: str, log_id: str) -> None:
    assert log_run_id(namespace, run_id) == log_id
    assert split_log_run_id(log_run_id(namespace, "refund-1")) == (namespace, "refund-1")
