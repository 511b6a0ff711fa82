"""The saga log's database roles and what each may do: the one place where privileges are
decided, applied at the end of every `agentsaga migrate`.

    migration role   whoever runs `agentsaga migrate` (a Helm hook Job once per release, or a
                     DBA): owns the tables, runs the DDL. Never a sidecar.
    agentsaga_sidecar   base of every namespace's sidecar credential `agentsaga_ns_<ns>`: begins
                     and adopts its namespace's runs, INSERTs intents, records outcomes,
                     compensations and observations, stages the plan, proposes and sends
                     corrections. No decision (the pivot decision, a correction's approver, a
                     person's settlement, the run's policy), and never a rewrite of a step's
                     arguments, compensation or key, nor of a run's binding but by adopting it.
    agentsaga_job    base of every namespace's Job credential `agentsaga_job_<ns>` (reconcile,
                     unwind, corrections Jobs): what the sidecar may do to existing runs, less
                     beginning runs, writing intents and staging plans.
    agentsaga_operator  decisions: the pivot decision, correction approvals, a person's
                     settlement of a step, the run's policy and pod as the AgentRun says;
                     reads everything else, of every namespace.
    `agentsaga prune` deletes whole ended runs: maintenance, as the migration role.

Enforced by Postgres, three ways: column-level grants (GRANTS) where a table mixes writers;
row-level security (POLICIES) keyed on the namespace of the calling credential
(`agentsaga_credentials`, migration 014): a namespace's credential sees and writes only the
runs `namespace/...` (the base roles logging in themselves: only bare run ids, outside
Kubernetes); and BEFORE UPDATE triggers (migration 014) for what a column grant cannot say
(a status moves only along the saga's transitions, a compensation is rewritten only when a
step that did not happen is sent again, a run is re-bound only by adopting it).

What Postgres does not guard with grants is closed here too, for every tenant role (the base
roles and every namespace credential): no TEMPORARY on the database and no CREATE on any
schema (revoked from PUBLIC as well, so a role made later has none either), membership of the
base role without SET (PostgreSQL 16: a credential cannot `SET ROLE agentsaga_sidecar` and
leave its namespace behind), and a connection limit and statement, lock and
idle-in-transaction timeouts (`TenantLimits`), so that no tenant takes every connection slot
or holds a lock without end.

Every table of the schema must have an explicit entry for every role in GRANTS (an empty tuple
is "nothing"); a table without one gets nothing, and a test names it. The roles are created
(NOLOGIN group roles are not enough for the embedded Postgres: they are LOGIN roles without a
password) when missing; a deployment sets their passwords or grants them to its own users.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass

from psycopg import sql

from agentsaga.errors import ConfigurationError
from agentsaga.store.connections import Connection

logger = logging.getLogger(__name__)

SIDECAR = "agentsaga_sidecar"
JOB = "agentsaga_job"
OPERATOR = "agentsaga_operator"
ROLES = (SIDECAR, JOB, OPERATOR)
NAMESPACED = (SIDECAR, JOB)
"""The base roles whose members are namespace credentials (row-level security applies)."""

_RUN_SIDECAR_INSERT = ("run_id, agent, state, owner_epoch, owner, pod_uid, namespace,"
                       " irreversible_before_pivot, pivot, trace_context, updated_at, ended_at")
# no run_id: a run is never renamed; namespace: BeginRun names it, the trigger keeps it
_RUN_SIDECAR_UPDATE = ("agent, state, owner_epoch, owner, pod_uid, namespace,"
                       " irreversible_before_pivot, pivot, trace_context, updated_at, ended_at")
_RUN_JOB_UPDATE = "state, owner_epoch, owner, pod_uid, updated_at, ended_at"
# a step's outcome, its compensation's progress, and (trigger-guarded) a resend's attempt;
# never its tool, key, arguments, commit index or contract
_STEP_OUTCOME = ("status, external_ref, result, error, comp_key, comp_status, comp_result,"
                 " updated_at")
_STEP_RESEND = "compensation, audience, writer_epoch, deadline, attempt, contract_hash, contract"
_CORRECTION_INSERT = "run_id, step_idx, tool, audience, rank, correction, state"
_ASK_HUMAN = "run_id, step_idx, step_key, why"
_PERSONS_WORD = ("run_id, step_idx, step_key, state, outcome, external_ref, settler, reason,"
                 " settled_at")

GRANTS: dict[str, dict[str, tuple[str, ...]]] = {
    "schema_migrations": {SIDECAR: ("SELECT",), JOB: ("SELECT",), OPERATOR: ("SELECT",)},
    # the secret name of the channel runs are announced on (migration 017): the operator's alone
    "run_channel": {SIDECAR: (), JOB: (), OPERATOR: ("SELECT",)},
    # which namespace each credential belongs to: everyone reads it, only migrate writes it
    "agentsaga_credentials": {SIDECAR: ("SELECT",), JOB: ("SELECT",), OPERATOR: ("SELECT",)},
    # each namespace's bounds on beginning runs (migration 020), and the rows BeginRun locks
    # to count: written and read only by the schema's owner (the trigger), never a tenant
    "run_bounds": {SIDECAR: (), JOB: (), OPERATOR: ()},
    "run_bound_locks": {SIDECAR: (), JOB: (), OPERATOR: ()},
    "saga_runs": {
        SIDECAR: ("SELECT", f"INSERT ({_RUN_SIDECAR_INSERT})", f"UPDATE ({_RUN_SIDECAR_UPDATE})"),
        JOB: ("SELECT", f"UPDATE ({_RUN_JOB_UPDATE})"),
        OPERATOR: ("SELECT",
                   "UPDATE (pivot_decision, policy, released_pod, state, updated_at)"),
    },
    # the operator writes a person's settlement of an UNKNOWN step (agentsaga settle,
    # status.settlements): its status, ref and why
    "saga_log": {SIDECAR: ("SELECT", "INSERT", f"UPDATE ({_STEP_OUTCOME}, {_STEP_RESEND})"),
                 JOB: ("SELECT", f"UPDATE ({_STEP_OUTCOME})"),
                 OPERATOR: ("SELECT", "UPDATE (status, external_ref, error, updated_at)")},
    # a re-sent step's later attempts, beside the row that keeps the first arguments
    "saga_attempts": {SIDECAR: ("SELECT", "INSERT"), JOB: ("SELECT",), OPERATOR: ("SELECT",)},
    # what late calls saw: append-only for everyone (no UPDATE, no DELETE)
    "saga_observations": {SIDECAR: ("SELECT", "INSERT"), JOB: ("SELECT", "INSERT"),
                          OPERATOR: ("SELECT",)},
    # a sidecar or Job hands a step to a person (`why`); only the operator's role records the
    # person's word, and it hands nothing over
    "step_settlements": {SIDECAR: ("SELECT", f"INSERT ({_ASK_HUMAN})"),
                         JOB: ("SELECT", f"INSERT ({_ASK_HUMAN})"),
                         OPERATOR: ("SELECT", f"INSERT ({_PERSONS_WORD})", "UPDATE")},
    "corrections": {
        SIDECAR: ("SELECT", f"INSERT ({_CORRECTION_INSERT})", "UPDATE (state)"),
        JOB: ("SELECT", f"INSERT ({_CORRECTION_INSERT})", "UPDATE (state)"),
        OPERATOR: ("SELECT", "UPDATE (state, approver, reason, decided_at)"),
    },
}
"""table -> role -> privileges (as GRANT takes them, column lists included)."""

RUN_TABLES = ("saga_runs", "saga_log", "saga_attempts", "saga_observations",
              "step_settlements", "corrections")
"""The tables of runs' rows (each has `run_id`): row-level security on all of them."""

OWN_NAMESPACE = (
    "CASE WHEN strpos(run_id, '/') = 0 THEN '' WHEN strpos(run_id, '/') = 1 THEN NULL"
    " ELSE split_part(run_id, '/', 1) END = (SELECT caller.namespace FROM agentsaga_credentials"
    " caller WHERE caller.role_name = current_user)"
    " AND strpos(substr(run_id, strpos(run_id, '/') + 1), '/') = 0")
"""The rows of the caller's namespace: `agentsaga_run_of_caller(run_id)` (migration 014) as an
expression of the row, with the caller's namespace read once per statement (an uncorrelated
subquery: one evaluation per table the statement reads), not once or more per row: a run id
`namespace/run` for a namespace's credential, a bare one for the base roles ('' namespace);
no credential row (NULL) matches nothing. The subquery is `agentsaga_caller_namespace()`'s body
written out: a function with a pinned search_path is never inlined, and its call switched
search_path twice and planned its body again at every statement. The names are bound when the
policy is created (by the migration role, under the schema's search_path), so no caller's
search_path or temporary relation can stand in for them."""

POLICIES: dict[str, tuple[tuple[str, ...], str]] = {
    # a namespace's credentials: the runs of their namespace only, reading and writing
    "agentsaga_own_namespace": (NAMESPACED, OWN_NAMESPACE),
    # the operator reflects every namespace's runs into its AgentRuns
    "agentsaga_every_namespace": ((OPERATOR,), "true"),
}
"""policy -> (roles, the rows they may see and write); a role in none of them sees no row."""

_DURATION = re.compile(r"[1-9][0-9]{0,8}(ms|s|min|h)")
SET_OPTION_VERSION = 160000
"""The first server version (PostgreSQL 16) that grants a membership without SET."""


@dataclass(frozen=True)
class TenantLimits:
    """What one tenant role (a base role or a namespace's credential) may take of the server:
    `connections` sessions at once (its CONNECTION LIMIT; a sidecar's pools hold up to 32),
    and per session the longest statement, lock wait and idle transaction, as Postgres
    durations (`30s`, `500ms`, `2min`). `agentsaga migrate --tenant-...` sets them; every
    migrate applies them again."""

    connections: int = 64
    statement_timeout: str = "30s"
    lock_timeout: str = "10s"
    idle_in_transaction_timeout: str = "60s"

    def __post_init__(self) -> None:
        if not 1 <= self.connections <= 10_000:
            raise ConfigurationError(
                f"tenant connection limit {self.connections}: give a number of connections "
                "from 1 to 10000 (each sidecar's pools hold up to 32)")
        for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_timeout"):
            value = getattr(self, name)
            if not _DURATION.fullmatch(value):
                raise ConfigurationError(
                    f"tenant {name.replace('_', ' ')} {value!r}: give a positive duration "
                    "such as 30s, 500ms, 2min or 1h")

    def settings(self) -> dict[str, str]:
        """Postgres setting -> value, as `ALTER ROLE ... SET` takes them."""
        return {"statement_timeout": self.statement_timeout,
                "lock_timeout": self.lock_timeout,
                "idle_in_transaction_session_timeout": self.idle_in_transaction_timeout}


DEFAULT_LIMITS = TenantLimits()

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def namespace_role(namespace: str, kind: str) -> str:
    """The name of a namespace's credential of `kind` (sidecar: `agentsaga_ns_<ns>`, job:
    `agentsaga_job_<ns>`), '-' as '_'; a name too long for Postgres ends in a digest."""
    if len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
        raise ConfigurationError(f"{namespace!r} is not a Kubernetes namespace name")
    prefix = {"sidecar": "agentsaga_ns_", "job": "agentsaga_job_"}[kind]
    name = prefix + namespace.replace("-", "_")
    if len(name) > 63:
        digest = hashlib.sha256(namespace.encode()).hexdigest()[:10]
        name = name[:63 - 11] + "_" + digest
    return name


def namespace_roles(namespace: str) -> dict[str, str]:
    """kind -> role name, for each credential of `namespace`."""
    return {kind: namespace_role(namespace, kind) for kind in ("sidecar", "job")}


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
    _require_createrole(conn, missing)
    for role in missing:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        logger.info("created database role %s", role)


def _require_createrole(conn: Connection, missing: list[str]) -> None:
    allowed = conn.execute("SELECT rolsuper OR rolcreaterole FROM pg_roles"
                           " WHERE rolname = current_user").fetchone()
    if not allowed or not allowed[0]:
        raise ConfigurationError(
            f"the database roles {', '.join(missing)} do not exist and the migration role may "
            "not create them; create them (CREATE ROLE ... LOGIN PASSWORD ...) or run "
            "`agentsaga migrate` as a role with CREATEROLE. Nothing was granted.")


def apply(conn: Connection, limits: TenantLimits = DEFAULT_LIMITS) -> None:
    """Create missing roles, then set every table's privileges to GRANTS exactly (what is not
    granted there is revoked) and its row-level security to POLICIES, close what grants do not
    cover (`close_database`) and set every tenant role's limits, in the caller's
    transaction."""
    ensure_roles(conn)
    close_database(conn)
    for role in NAMESPACED:
        limit(conn, role, limits)
    for role in ROLES:
        ident = sql.Identifier(role)
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
            sql.Identifier(str(conn.info.dbname)), ident))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
            sql.Identifier(_schema(conn)), ident))
        # a tenant draws ids (USAGE) but cannot read a sequence's position, which counts
        # every namespace's rows
        conn.execute(sql.SQL("REVOKE ALL ON ALL SEQUENCES IN SCHEMA {} FROM {}").format(
            sql.Identifier(_schema(conn)), ident))
        conn.execute(sql.SQL("GRANT {} ON ALL SEQUENCES IN SCHEMA {} TO {}").format(
            sql.SQL("USAGE, SELECT" if role == OPERATOR else "USAGE"),
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
    for table in RUN_TABLES:
        apply_policies(conn, table)
    own_credential_only(conn)


def own_credential_only(conn: Connection) -> None:
    """A tenant role reads its own row of `agentsaga_credentials` only (which namespace it
    is); the other namespaces' credentials are not its to list. The operator reads all."""
    conn.execute("ALTER TABLE agentsaga_credentials ENABLE ROW LEVEL SECURITY")
    for name, who, rows in (("agentsaga_own_credential", NAMESPACED, "role_name = current_user"),
                            ("agentsaga_every_credential", (OPERATOR,), "true")):
        conn.execute(sql.SQL("DROP POLICY IF EXISTS {} ON agentsaga_credentials").format(
            sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE POLICY {} ON agentsaga_credentials FOR SELECT TO {} USING ("
                             + rows + ")").format(
            sql.Identifier(name), sql.SQL(", ").join(sql.Identifier(r) for r in who)))


def close_database(conn: Connection) -> None:
    """No TEMPORARY on the database and no CREATE on a schema for PUBLIC (so for no role made
    later) nor for a tenant role: a temporary or planted relation could otherwise stand in for
    one a function, policy or view names. The schemas the migration role owns (every one it
    may revoke on); the tests read every schema of the database for every tenant role."""
    database = sql.Identifier(str(conn.info.dbname))
    tenants = [SIDECAR, JOB, *(str(r[0]) for r in conn.execute(
        "SELECT rolname FROM pg_roles WHERE rolname LIKE 'agentsaga\\_ns\\_%'"
        " OR rolname LIKE 'agentsaga\\_job\\_%' ORDER BY rolname"))]
    grantees = sql.SQL(", ").join([sql.SQL("PUBLIC"), *(sql.Identifier(r) for r in tenants)])
    owns_database = conn.execute(
        "SELECT pg_has_role(current_user, datdba, 'USAGE') FROM pg_database"
        " WHERE datname = current_database()").fetchone()
    if owns_database and owns_database[0]:
        conn.execute(sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM {}").format(
            database, grantees))
    else:
        logger.warning("the migration role does not own database %s and cannot revoke "
                       "TEMPORARY on it; its owner runs: REVOKE TEMPORARY ON DATABASE %s FROM "
                       "PUBLIC", conn.info.dbname, conn.info.dbname)
    owned = [str(r[0]) for r in conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname <> 'information_schema'"
        " AND nspname NOT LIKE 'pg\\_%' AND pg_has_role(current_user, nspowner, 'USAGE')"
        " ORDER BY nspname")]
    for schema_name in owned:
        conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA {} FROM {}").format(
            sql.Identifier(schema_name), grantees))


def limit(conn: Connection, role: str, limits: TenantLimits) -> None:
    """`role`'s connection limit and session timeouts (`TenantLimits`)."""
    ident = sql.Identifier(role)
    conn.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT {}").format(
        ident, sql.Literal(limits.connections)))
    for setting, value in limits.settings().items():
        conn.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(
            ident, sql.Identifier(setting), sql.Literal(value)))


def grant_without_set(conn: Connection, base: str, role: str) -> None:
    """`role` a member of `base` that uses its privileges (INHERIT) but may not become it (no
    SET): whoever holds a namespace's credential cannot `SET ROLE` to the base role, which
    row-level security keys to the runs outside Kubernetes. Any earlier grant with SET, by
    whichever grantor, loses it. Needs PostgreSQL 16."""
    version = conn.info.server_version
    if version < SET_OPTION_VERSION:
        raise ConfigurationError(
            f"namespace credentials need PostgreSQL 16 or later (this server is "
            f"{version // 10000}): older servers cannot make {role} a member of {base} "
            f"without letting it SET ROLE {base}. Upgrade the server; nothing was granted.")
    conn.execute(sql.SQL("GRANT {} TO {} WITH INHERIT TRUE, SET FALSE").format(
        sql.Identifier(base), sql.Identifier(role)))
    grantors = [str(r[0]) for r in conn.execute(
        "SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.grantor"
        " WHERE m.roleid = to_regrole(%s) AND m.member = to_regrole(%s) AND m.set_option",
        (base, role))]
    for grantor in grantors:
        conn.execute(sql.SQL("REVOKE SET OPTION FOR {} FROM {} GRANTED BY {}").format(
            sql.Identifier(base), sql.Identifier(role), sql.Identifier(grantor)))


def apply_policies(conn: Connection, table: str) -> None:
    """Row-level security on `table` as POLICIES says (the table's owner, the migration role,
    is not subject to it; nor is a superuser)."""
    ident = sql.Identifier(table)
    conn.execute(sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(ident))
    for name, (roles, rows) in POLICIES.items():
        conn.execute(sql.SQL("DROP POLICY IF EXISTS {} ON {}").format(sql.Identifier(name), ident))
        conn.execute(sql.SQL("CREATE POLICY {} ON {} TO {} USING (" + rows + ") WITH CHECK ("
                             + rows + ")").format(
            sql.Identifier(name), ident, sql.SQL(", ").join(sql.Identifier(r) for r in roles)))


def provision(conn: Connection, namespace: str,
              passwords: dict[str, str] | None = None,
              limits: TenantLimits = DEFAULT_LIMITS) -> dict[str, str]:
    """The credentials of one agent namespace (`namespace_roles`): created when missing (LOGIN;
    with the password `passwords[kind]` when given, set again at every call), made members of
    their base role without SET (`grant_without_set`), given `limits`, with no TEMPORARY and
    no CREATE (`close_database`), and recorded as that namespace's in
    `agentsaga_credentials`. Returns kind -> role name. In the caller's transaction, after
    `apply`."""
    made = namespace_roles(namespace)
    for kind, role in made.items():
        ident = sql.Identifier(role)
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if exists is None:
            _require_createrole(conn, [role])
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
            logger.info("created database role %s (namespace %s)", role, namespace)
        password = (passwords or {}).get(kind)
        if password:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(ident,
                                                                    sql.Literal(password)))
        base = SIDECAR if kind == "sidecar" else JOB
        grant_without_set(conn, base, role)
        limit(conn, role, limits)
        conn.execute(
            "INSERT INTO agentsaga_credentials (role_name, namespace, kind) VALUES (%s, %s, %s)"
            " ON CONFLICT (role_name) DO UPDATE SET namespace = EXCLUDED.namespace,"
            " kind = EXCLUDED.kind", (role, namespace, kind))
    close_database(conn)
    return made


@dataclass(frozen=True)
class RunBounds:
    """How many runs a namespace may begin (migration 020, enforced by a trigger on
    saga_runs): `runs_per_window` in any `window_s` seconds, and `open_runs` open at once."""

    runs_per_window: int = 300
    """Runs the namespace may begin in any `window_s` seconds."""
    window_s: int = 60
    """The sliding window, in seconds; a refusal says to retry once its oldest run left it."""
    open_runs: int = 500
    """Runs of the namespace open (not ended) at once."""

    def __post_init__(self) -> None:
        for name in ("runs_per_window", "window_s", "open_runs"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"run bounds: {name} must be at least 1, got "
                                         f"{getattr(self, name)}")


def set_run_bounds(conn: Connection, namespace: str, bounds: RunBounds) -> None:
    """The namespace's run bounds ('*': the defaults of every namespace without its own), as
    the schema's owner; set again at every call."""
    if namespace != "*":
        namespace_role(namespace, "sidecar")  # a Kubernetes namespace name, or refused
    conn.execute(
        "INSERT INTO run_bounds (namespace, runs_per_window, window_s, open_runs)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (namespace) DO UPDATE SET"
        " runs_per_window = EXCLUDED.runs_per_window, window_s = EXCLUDED.window_s,"
        " open_runs = EXCLUDED.open_runs",
        (namespace, bounds.runs_per_window, bounds.window_s, bounds.open_runs))


def run_bounds(conn: Connection) -> dict[str, RunBounds]:
    """namespace -> its bounds, '*' the defaults."""
    rows = conn.execute("SELECT namespace, runs_per_window, window_s, open_runs"
                        " FROM run_bounds ORDER BY namespace").fetchall()
    return {str(r[0]): RunBounds(int(r[1]), int(r[2]), int(r[3])) for r in rows}


def credentials(conn: Connection) -> dict[str, tuple[str, str]]:
    """role -> (namespace, kind) of every credential provisioned."""
    rows = conn.execute("SELECT role_name, namespace, kind FROM agentsaga_credentials"
                        " ORDER BY role_name").fetchall()
    return {str(r[0]): (str(r[1]), str(r[2])) for r in rows}


def _schema(conn: Connection) -> str:
    row = conn.execute("SELECT current_schema()").fetchone()
    return str(row[0]) if row and row[0] else "public"


def _columns(conn: Connection, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
        " AND NOT attisdropped ORDER BY attnum", (table,)).fetchall()
    return [str(r[0]) for r in rows]
