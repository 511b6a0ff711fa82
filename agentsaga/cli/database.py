"""Opening the saga log for a command: which database, how long to wait for it, and whether the
command may create the schema.

Only `agentsaga migrate` and the sidecar apply migrations. Every other command reads (or
decides on) a saga log that must already be there: pointed at a database without the schema,
it says so and changes nothing, instead of creating tables in a database that is not ours.
"""

from __future__ import annotations

from agentsaga.errors import ConfigurationError, DatabaseRefused
from agentsaga.settings import Settings
from agentsaga.store import SagaLog, StoreHooks
from agentsaga.store.postgres import Role, saga_log_dsn


def resolve_dsn(dsn: str | None, settings: Settings, role: Role = "sidecar") -> str:
    """--dsn, else the role's DSN (`agentsaga.store.postgres.saga_log_dsn`)."""
    return dsn or saga_log_dsn(settings, role)


def is_embedded(dsn: str | None, settings: Settings, role: Role = "sidecar") -> bool:
    """Whether the role's saga log is the embedded Postgres: no --dsn, no DSN of the role's
    own (AGENTSAGA_OPERATOR_DSN, AGENTSAGA_MIGRATE_DSN), no AGENTSAGA_DSN."""
    own = {"operator": settings.operator_dsn, "migrate": settings.migrate_dsn}.get(role)
    return not (dsn or own or settings.dsn)


def open_saga_log(dsn: str | None, settings: Settings, *, migrate: bool = False,
                  check_schema: bool = True, hooks: StoreHooks | None = None,
                  role: Role = "sidecar") -> SagaLog:
    """The saga log, waited for up to AGENTSAGA_DB_WAIT_S. `migrate`: apply what is missing;
    else, unless `check_schema` is off, refuse a database whose schema is missing or behind
    (`SagaLog.require_schema`)."""
    role = "migrate" if migrate else role
    target = resolve_dsn(dsn, settings, role)
    embedded = is_embedded(dsn, settings, role)
    try:
        saga_log = SagaLog(target, min_size=1, max_size=2, async_outcomes=False,
                           hooks=hooks).open(migrate=migrate, timeout=settings.db_wait_s)
    except DatabaseRefused as exc:
        if not embedded:
            raise
        # the embedded server trusts its local users: only a missing role refuses one
        raise ConfigurationError(
            f"the embedded Postgres in {settings.embedded_dir} has no saga log yet "
            f"({exc.reason}); nothing was read or changed. Run `agentsaga migrate` first, "
            "with the same AGENTSAGA_DATA_DIR: it creates the schema and the roles.") from None
    if migrate or not check_schema:
        return saga_log
    try:
        saga_log.require_schema(
            f"the embedded Postgres in {settings.embedded_dir}" if embedded else None)
    except BaseException:
        saga_log.close()
        raise
    return saga_log
