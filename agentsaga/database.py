"""Opening the saga log for a command: which database, how long to wait for it, and whether the
command may create the schema.

Only `agentsaga migrate` and the sidecar apply migrations. Every other command reads (or
decides on) a saga log that must already be there: pointed at a database without the schema,
it says so and changes nothing, instead of creating tables in a database that is not ours.
"""

from __future__ import annotations

from agentsaga.postgres import Role, saga_log_dsn
from agentsaga.settings import Settings
from agentsaga.store import SagaLog, StoreHooks


def resolve_dsn(dsn: str | None, settings: Settings, role: Role = "sidecar") -> str:
    """--dsn, else the role's DSN (`agentsaga.postgres.saga_log_dsn`)."""
    return dsn or saga_log_dsn(settings, role)


def open_saga_log(dsn: str | None, settings: Settings, *, migrate: bool = False,
                  check_schema: bool = True, hooks: StoreHooks | None = None,
                  role: Role = "sidecar") -> SagaLog:
    """The saga log, waited for up to AGENTSAGA_DB_WAIT_S. `migrate`: apply what is missing;
    else, unless `check_schema` is off, refuse a database whose schema is missing or behind
    (`SagaLog.require_schema`)."""
    target = resolve_dsn(dsn, settings, "migrate" if migrate else role)
    saga_log = SagaLog(target, min_size=1, max_size=2, async_outcomes=False, hooks=hooks).open(
        migrate=migrate, timeout=settings.db_wait_s)
    if migrate or not check_schema:
        return saga_log
    explicit = bool(dsn or settings.dsn)
    try:
        saga_log.require_schema(
            None if explicit else f"the embedded Postgres in {settings.embedded_dir}")
    except BaseException:
        saga_log.close()
        raise
    return saga_log
