"""The saga log's database roles and what each may do: the one place where privileges are
decided, applied at the end of every `agentsaga migrate`.

    migration role   whoever runs `agentsaga migrate` (a Helm hook Job once per release, or a
                     DBA): owns the tables, runs the DDL. Never a sidecar.
    agentsaga_sidecar   runs and steps: begins and adopts runs, writes intents and outcomes,
                     stages the plan, proposes and sends corrections. No decision: it cannot
                     write the pivot decision, a correction's approver, nor the run's policy.
    agentsaga_operator  decisions: the pivot decision, correction approvals, a person's
                     settlement of a step, the run's policy and pod as the AgentRun says;
                     reads everything else.
    `agentsaga prune` deletes whole ended runs: maintenance, as the migration role.

Enforced by Postgres: column-level grants where a table mixes both (saga_runs, corrections).
Every table of the schema must have an explicit entry for every role in GRANTS (an empty tuple
is "nothing"); a table without one gets nothing, and a test names it. The roles are created
(NOLOGIN group roles are not enough for the embedded Postgres: they are LOGIN roles without a
password) when missing; a deployment sets their passwords or grants them to its own users.
"""

from __future__ import annotations

import logging

from psycopg import sql

from agentsaga.errors import ConfigurationError
from agentsaga.store.connections import Connection

logger = logging.getLogger(__name__)

SIDECAR = "agentsaga_sidecar"
OPERATOR = "agentsaga_operator"
ROLES = (SIDECAR, OPERATOR)

_RUN_SIDECAR_COLUMNS = ("run_id, agent, state, owner_epoch, owner, pod_uid, namespace,"
                        " irreversible_before_pivot, pivot, trace_context, updated_at, ended_at")

GRANTS: dict[str, dict[str, tuple[str, ...]]] = {
    "schema_migrations": {SIDECAR: ("SELECT",), OPERATOR: ("SELECT",)},
    "saga_runs": {
        SIDECAR: ("SELECT", f"INSERT ({_RUN_SIDECAR_COLUMNS})",
                  f"UPDATE ({_RUN_SIDECAR_COLUMNS})"),
        OPERATOR: ("SELECT",
                   "UPDATE (pivot_decision, policy, released_pod, state, updated_at)"),
    },
    # the operator writes a person's settlement of an UNKNOWN step (agentsaga settle,
    # status.settlements): its status, ref and why
    "saga_log": {SIDECAR: ("SELECT", "INSERT", "UPDATE"),
                 OPERATOR: ("SELECT", "UPDATE (status, external_ref, error, updated_at)")},
    # a re-sent step's later attempts, beside the row that keeps the first arguments
    "saga_attempts": {SIDECAR: ("SELECT", "INSERT"), OPERATOR: ("SELECT",)},
    # what late calls saw: append-only for everyone (no UPDATE, no DELETE)
    "saga_observations": {SIDECAR: ("SELECT", "INSERT"), OPERATOR: ("SELECT",)},
    # a sidecar hands a step to a person; only the operator's role records the person's word
    "step_settlements": {SIDECAR: ("SELECT", "INSERT (run_id, step_idx, step_key, why)"),
                         OPERATOR: ("SELECT", "INSERT", "UPDATE")},
    "corrections": {
        SIDECAR: ("SELECT", "INSERT (run_id, step_idx, tool, audience, rank, correction, state)",
                  "UPDATE (state)"),
        OPERATOR: ("SELECT", "UPDATE (state, approver, reason, decided_at)"),
    },
}
"""table -> role -> privileges (as GRANT takes them, column lists included)."""


def tables(conn: Connection) -> list[str]:
    """Every table of the saga log's schema."""
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                        " ORDER BY tablename").fetchall()
    return [str(r[0]) for r in rows]


def undecided(conn: Connection) -> list[str]:
    """`table: role` for every table of the schema that GRANTS says nothing about for a role."""
    return [f"{table}: {role}" for table in tables(conn) for role in ROLES
            if role not in GRANTS.get(table, {})]


def ensure_roles(conn: Connection) -> None:
    """Create the roles that are missing (needs CREATEROLE); ConfigurationError says what to do
    when the migration role may not."""
    existing = {str(r[0]) for r in conn.execute(
        "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (list(ROLES),)).fetchall()}
    missing = [role for role in ROLES if role not in existing]
    if not missing:
        return
    allowed = conn.execute("SELECT rolsuper OR rolcreaterole FROM pg_roles"
                           " WHERE rolname = current_user").fetchone()
    if not allowed or not allowed[0]:
        raise ConfigurationError(
            f"the database roles {', '.join(missing)} do not exist and the migration role may "
            "not create them; create them (CREATE ROLE ... LOGIN PASSWORD ...) or run "
            "`agentsaga migrate` as a role with CREATEROLE. Nothing was granted.")
    for role in missing:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        logger.info("created database role %s", role)


def apply(conn: Connection) -> None:
    """Create missing roles, then set every table's privileges to GRANTS exactly (what is not
    granted there is revoked), in the caller's transaction."""
    ensure_roles(conn)
    for role in ROLES:
        ident = sql.Identifier(role)
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
            sql.Identifier(str(conn.info.dbname)), ident))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
            sql.Identifier(_schema(conn)), ident))
        conn.execute(sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}").format(
            sql.Identifier(_schema(conn)), ident))
    for table in tables(conn):
        decisions = GRANTS.get(table, {})
        for role in ROLES:
            target = sql.SQL("{} FROM {}").format(sql.Identifier(table), sql.Identifier(role))
            conn.execute(sql.SQL("REVOKE ALL ON TABLE ") + target)
            conn.execute(sql.SQL("REVOKE ALL ({}) ON TABLE {} FROM {}").format(
                sql.SQL(", ").join(sql.Identifier(c) for c in _columns(conn, table)),
                sql.Identifier(table), sql.Identifier(role)))
            for privilege in decisions.get(role, ()):
                conn.execute(sql.SQL("GRANT " + privilege + " ON TABLE {} TO {}").format(
                    sql.Identifier(table), sql.Identifier(role)))
        missing = [role for role in ROLES if role not in decisions]
        if missing:
            # not the saga log's (another application's table in the same schema), or missing
            # from GRANTS, which a test of the schema catches: either way the role gets nothing
            logger.info("table %s has no grant decision for %s (agentsaga/store/roles.py); "
                        "they get nothing", table, ", ".join(missing))


def _schema(conn: Connection) -> str:
    row = conn.execute("SELECT current_schema()").fetchone()
    return str(row[0]) if row and row[0] else "public"


def _columns(conn: Connection, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
        " AND NOT attisdropped ORDER BY attnum", (table,)).fetchall()
    return [str(r[0]) for r in rows]
