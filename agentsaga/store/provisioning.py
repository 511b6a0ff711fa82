"""Databases and bulk rows for the benchmark (`agentsaga bench`): a fresh migrated database,
UNKNOWN rows by the thousand (as after a region outage), and the floor every write pays (one
durable INSERT and COMMIT)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentsaga.store import schema

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def with_db(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)  # type: ignore[arg-type]


def create_database(admin_dsn: str, name: str) -> str:
    """Create database `name` on `admin_dsn`'s server, migrate it, return its DSN."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"database name {name!r}: use lower-case letters, digits and _")
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = with_db(admin_dsn, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.migrate(conn)
    return dsn


def copy_unknown_steps(dsn: str, runs: Sequence[str], *, tool: str, tool_class: str,
                       key: Callable[[str], str], args_json: str, error: str) -> None:
    """One run per id, each with one UNKNOWN step 0 of `tool` under `key(run_id)` (COPY)."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        with cur.copy("COPY saga_runs (run_id) FROM STDIN") as copy:
            for run in runs:
                copy.write_row((run,))
        with cur.copy("COPY saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
                      " status, writer_epoch, error) FROM STDIN") as copy:
            for run in runs:
                copy.write_row((run, 0, tool, tool_class, key(run), args_json, "UNKNOWN", 1,
                                error))


@contextmanager
def floor_commits(dsn: str) -> Iterator[Callable[[], None]]:
    """A function that makes one durable `INSERT ... COMMIT` round trip (synchronous_commit
    on) into a table of its own, and the time it costs is the floor of any durable write."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id BIGSERIAL PRIMARY KEY, v TEXT)")
        conn.execute("SET synchronous_commit TO on")

        def commit_one() -> None:
            conn.execute("INSERT INTO bench_floor (v) VALUES (%s)", ("x",))

        yield commit_one
