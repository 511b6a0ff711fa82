"""Numbered SQL migrations of the saga log, applied in order and recorded in schema_migrations."""

from __future__ import annotations

from importlib import resources
from typing import Any

import psycopg

# Any constant works; it only has to be the same for every process that migrates.
_LOCK_ID = 0x5A6A_0001


def available() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration file shipped with the package, in order."""
    found = []
    for entry in resources.files(__package__).iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:3].isdigit():
            found.append((int(name[:3]), name, entry.read_text()))
    return sorted(found)


def pending(conn: psycopg.Connection[Any]) -> list[str]:
    """The migrations this database lacks (all of them when it has no schema); reads only."""
    table = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()
    if table is None or _first(table) is None:
        return [name for _, name, _ in available()]
    done = {int(_first(row)) for row in conn.execute("SELECT version FROM schema_migrations")}
    return [name for version, name, _ in available() if version not in done]


def _first(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def migrate(conn: psycopg.Connection[Any]) -> list[str]:
    """Apply the migrations this database lacks; returns the names applied. Safe to run from
    several processes at once (an advisory lock serialises them)."""
    applied: list[str] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INT PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        done = {
            int(next(iter(row.values())) if isinstance(row, dict) else row[0])
            for row in conn.execute("SELECT version FROM schema_migrations")
        }
        for version, name, sql in available():
            if version in done:
                continue
            conn.execute(sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name)
            )
            applied.append(name)
    return applied
