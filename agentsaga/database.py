"""Opening the saga log for a command: which database, how long to wait for it, and whether the
command may create the schema.

Only `agentsaga migrate` and the sidecar apply migrations. Every other command reads (or
decides on) a saga log that must already be there: pointed at a database without the schema,
it says so and changes nothing, instead of creating tables in a database that is not ours.
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

from agentsaga import migrations
from agentsaga.errors import ConfigurationError
from agentsaga.log import SagaLog
from agentsaga.postgres import saga_log_dsn
from agentsaga.settings import Settings


def resolve_dsn(dsn: str | None, settings: Settings) -> str:
    """--dsn, else AGENTSAGA_DSN, else the embedded Postgres in the per-user data directory."""
    return saga_log_dsn(settings.with_(dsn=dsn) if dsn else settings)


def open_saga_log(dsn: str | None, settings: Settings, *, migrate: bool = False,
                  check_schema: bool = True) -> SagaLog:
    """The saga log, waited for up to AGENTSAGA_DB_WAIT_S. `migrate`: apply what is missing;
    else, unless `check_schema` is off, refuse a database whose schema is missing or behind."""
    target = resolve_dsn(dsn, settings)
    saga_log = SagaLog(target, min_size=1, max_size=2, async_outcomes=False).open(
        migrate=migrate, timeout=settings.db_wait_s)
    if migrate or not check_schema:
        return saga_log
    try:
        require_schema(saga_log, settings, explicit=bool(dsn or settings.dsn))
    except BaseException:
        saga_log.close()
        raise
    return saga_log


def require_schema(saga_log: SagaLog, settings: Settings, *, explicit: bool = True) -> None:
    """ConfigurationError, naming the database and `agentsaga migrate`, unless the saga log's
    schema is there and current."""
    with saga_log.pool.connection() as conn:
        missing = migrations.pending(conn)
    if not missing:
        return
    where = describe(saga_log.dsn) if explicit else (
        f"the embedded Postgres in {settings.embedded_dir}")
    if len(missing) == len(migrations.available()):
        raise ConfigurationError(
            f"{where} has no saga log (no agentsaga schema); nothing was read or changed. "
            "Check that --dsn / AGENTSAGA_DSN (or AGENTSAGA_DATA_DIR) names the sidecar's "
            "database; to create the schema there, run `agentsaga migrate` with the same "
            "settings.")
    raise ConfigurationError(
        f"the saga log in {where} is older than this agentsaga ({', '.join(missing)} not "
        "applied); run `agentsaga migrate` with the same settings first.")


def describe(dsn: str) -> str:
    """'the database agentsaga on db.example:5432' (never the password)."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "the configured database"
    host = info.get("host") or "localhost"
    return f"the database {info.get('dbname') or '(default)'} on {host}:{info.get('port') or 5432}"
