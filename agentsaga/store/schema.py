"""The schema: numbered SQL migrations (`agentsaga/migrations/NNN_*.sql`), applied in order and
recorded in `schema_migrations`."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

import psycopg

from agentsaga.errors import ConfigurationError
from agentsaga.store import roles
from agentsaga.store.connections import Connection

_MIGRATIONS_TABLE = ("CREATE TABLE IF NOT EXISTS schema_migrations ("
                     " version INT PRIMARY KEY, name TEXT NOT NULL,"
                     " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")


def available() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration file shipped with the package, in order."""
    found = []
    for entry in resources.files("agentsaga.migrations").iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:3].isdigit():
            found.append((int(name[:3]), name, entry.read_text()))
    return sorted(found)


def is_current(conn: Connection) -> bool:
    """Whether every shipped migration is applied (one read when it is)."""
    wanted = {version for version, _, _ in available()}
    table = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()
    if table is None or table[0] is None:
        return False
    done = {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}
    return wanted <= done


def pending(conn: Connection) -> list[str]:
    """The migrations this database lacks (all of them when it has no schema); reads only."""
    table = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()
    if table is None or table[0] is None:
        return [name for _, name, _ in available()]
    done = {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}
    return [name for version, name, _ in available() if version not in done]


def lock(conn: Connection) -> None:
    """The migration lock, in the caller's transaction until it ends: `schema_migrations` in
    SHARE ROW EXCLUSIVE mode, which conflicts with itself and not with reads. Only a role that
    may UPDATE, DELETE or TRUNCATE the table may take it (the migration role; every tenant role
    may only read it), unlike an advisory lock, which any role may hold for ever. The first
    migrate of a database creates the table first; two first migrates at once both try, and
    the one that loses that race finds it made (its attempt is undone alone, a savepoint)."""
    for _ in range(2):
        try:
            with conn.transaction():
                conn.execute(_MIGRATIONS_TABLE)
            break
        except psycopg.errors.UniqueViolation:
            continue  # created by a concurrent first migrate as ours waited: it exists now
    conn.execute("LOCK TABLE schema_migrations IN SHARE ROW EXCLUSIVE MODE")


def migrate(conn: Connection,
            namespaces: Mapping[str, Mapping[str, str]] | None = None,
            limits: roles.TenantLimits = roles.DEFAULT_LIMITS) -> list[str]:
    """Apply the migrations this database lacks, then the roles' privileges and the tenant
    roles' `limits` (`agentsaga.store.roles`), then the credentials of each agent namespace of
    `namespaces` (namespace -> kind -> password, `roles.provision`); returns the names
    applied. Safe to run from several processes at once (`lock` serialises them)."""
    applied: list[str] = []
    with conn.transaction():
        lock(conn)
        done = {int(row[0]) for row in conn.execute("SELECT version FROM schema_migrations")}
        for version, name, sql in available():
            if version in done:
                continue
            conn.execute(sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name)
            )
            applied.append(name)
        roles.apply(conn, limits)  # every table's privileges, for every role, every migrate
        for namespace, passwords in (namespaces or {}).items():
            roles.provision(conn, namespace, dict(passwords), limits)
    return applied


def check_constraints(conn: Connection) -> dict[str, str]:
    """The CHECK constraints of the saga log's tables by name, as Postgres prints them (for the
    test that holds them to `agentsaga.states`)."""
    rows = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE contype = 'c' AND conrelid IN ('saga_runs'::regclass, 'saga_log'::regclass,"
        " 'corrections'::regclass)").fetchall()
    return {str(name): str(definition) for name, definition in rows}


def missing_schema(where: str, missing: list[str]) -> ConfigurationError:
    """What a command that only reads says about a database whose schema is absent or behind:
    it changed nothing, and `agentsaga migrate` creates or updates the schema."""
    if len(missing) == len(available()):
        return ConfigurationError(
            f"{where} has no saga log (no agentsaga schema); nothing was read or changed. "
            "Check that --dsn / AGENTSAGA_DSN (or AGENTSAGA_DATA_DIR) names the sidecar's "
            "database; to create the schema there, run `agentsaga migrate` with the same "
            "settings.")
    return ConfigurationError(
        f"the saga log in {where} is older than this agentsaga ({', '.join(missing)} not "
        "applied); run `agentsaga migrate` with the same settings first.")
