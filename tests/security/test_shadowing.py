"""Name resolution cannot be turned against the schema's functions. A tenant's credential may
not create a temporary table at all (`test_hostile_tenant.py` tries one named after each
relation the functions read); these tests prove the functions do not depend on that refusal.
Every relation and catalog name the functions read (from the catalog: the relations of the
schema and of pg_catalog that their bodies name) is shadowed with hostile rows (the caller
is namespace B's with no kind, a superuser, the owner of every table; no step was settled by a
person), once by temporary tables in a session of namespace A's credential given TEMPORARY
for the test, once by a schema first in the session's search_path, with functions of the
same names besides; the functions still read the real tables and every guard still refuses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentsaga.keys import step_key
from agentsaga.store import roles
from sagatest import tenant_world
from sagatest.tenant_world import OWN, VICTIM, A, B

Record = Callable[[str, object], None]

HOSTILE_ROWS = {
    # the caller claims namespace B and no kind: the Critical finding's row
    "agentsaga_credentials": "UPDATE {t} SET namespace = '" + B + "', kind = NULL",
    "pg_roles": "UPDATE {t} SET rolsuper = true, rolbypassrls = true",
    "pg_class": "UPDATE {t} SET relowner = (SELECT oid FROM pg_catalog.pg_roles"
                " WHERE rolname = current_user)",
    "step_settlements": "DELETE FROM {t}",
    "run_channel": "UPDATE {t} SET name = 'stolen'",
}
"""How a shadow of each name lies (the rest are copies of what the caller may read)."""

HOSTILE_FUNCTIONS = (
    "CREATE FUNCTION {s}.pg_has_role(name, oid, text) RETURNS boolean LANGUAGE sql"
    " AS 'SELECT true'",
    "CREATE FUNCTION {s}.agentsaga_caller_kind() RETURNS text LANGUAGE sql AS 'SELECT NULL'",
    "CREATE FUNCTION {s}.agentsaga_caller_namespace() RETURNS text LANGUAGE sql"
    " AS 'SELECT ''" + B + "'''",
    "CREATE FUNCTION {s}.agentsaga_caller_is_owner() RETURNS boolean LANGUAGE sql"
    " AS 'SELECT true'",
    "CREATE FUNCTION {s}.agentsaga_run_of_caller(text) RETURNS boolean LANGUAGE sql"
    " AS 'SELECT true'",
)


@pytest.fixture
def world(pg: str) -> Iterator[tenant_world.Credentials]:
    """The tenant world, with a Proposed correction of the attacker's own step 0."""
    creds = tenant_world.build(pg)
    with psycopg.connect(pg) as conn:
        conn.execute("INSERT INTO corrections (run_id, step_idx, tool, audience, rank, state)"
                     " VALUES (%s, 0, 'charge', '{customer}', 1, 'Proposed')", (OWN,))
    yield creds


def _source(conn: psycopg.Connection[Any], name: str, schema: str) -> str:
    """The real relation `name` qualified: the schema's, else pg_catalog's."""
    row = conn.execute("SELECT n.nspname FROM pg_class c JOIN pg_namespace n"
                       " ON n.oid = c.relnamespace WHERE c.relname = %s AND n.nspname IN (%s,"
                       " 'pg_catalog') ORDER BY n.nspname = 'pg_catalog'",
                       (name, schema)).fetchone()
    assert row is not None, name
    return sql.SQL("{}.{}").format(sql.Identifier(str(row[0])),
                                   sql.Identifier(name)).as_string(conn)


def _shadow(conn: psycopg.Connection[Any], names: list[str], schema: str,
            where: str) -> list[str]:
    """A hostile copy of each relation of `names` in `where` ('pg_temp' or a schema), made on
    `conn`; returns those made whole (a catalog whose columns cannot be copied is shadowed by
    a table of the same name and a column of its own)."""
    whole = []
    for name in names:
        target = sql.SQL("{}.{}").format(sql.Identifier(where), sql.Identifier(name)).as_string(
            conn)
        try:
            with conn.transaction():
                conn.execute(f"CREATE TABLE {target} AS SELECT * FROM "  # noqa: S608
                             f"{_source(conn, name, schema)}")
            whole.append(name)
        except psycopg.Error:
            conn.execute(f"CREATE TABLE {target} (shadow INT)")
            continue
        if name in HOSTILE_ROWS:
            conn.execute(HOSTILE_ROWS[name].format(t=target))
    return whole


def _still_refused(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """What the functions and guards did wrong in this session (the real tables named by
    their schema, so that only the functions' own name resolution is at stake)."""
    s = sql.Identifier(schema).as_string(conn)
    wrong = []
    for query, expected in (
            ("SELECT agentsaga_caller_namespace()", A),
            ("SELECT agentsaga_caller_kind()", "sidecar"),
            (f"SELECT {s}.agentsaga_run_of_caller('{VICTIM}')", False),
            (f"SELECT {s}.agentsaga_caller_is_owner()", False),
            (f"SELECT {s}.agentsaga_caller_is_operator()", False),
            (f"SELECT count(*) FROM {s}.saga_log WHERE run_id = '{VICTIM}'", 0)):
        query = query.replace("SELECT agentsaga_", f"SELECT {s}.agentsaga_")
        with conn.transaction():
            got = conn.execute(query).fetchone()
        if got is None or got[0] != expected:
            wrong.append(f"{query}: {got}")
    with conn.transaction():
        moved = conn.execute(
            f"UPDATE {s}.saga_runs SET pod_uid = 'pod-a', owner = 'pod-a',"  # noqa: S608
            " owner_epoch = owner_epoch + 1 WHERE run_id = %s", (VICTIM,)).rowcount
    if moved:
        wrong.append(f"re-bound {VICTIM}")
    for name, statement, params in (
            ("move the own step CONFIRMED -> UNKNOWN",
             f"UPDATE {s}.saga_log SET status = 'UNKNOWN' WHERE run_id = %s AND step_idx = 0",
             (OWN,)),
            ("insert a CONFIRMED step",
             f"INSERT INTO {s}.saga_log (run_id, step_idx, tool, tool_class, idempotency_key,"
             " args, status, writer_epoch) VALUES (%s, 1, 'charge', 'compensatable', %s, '{}',"
             " 'CONFIRMED', 1)", (OWN, step_key(OWN, 1, "charge"))),
            ("re-bind the own run without adopting it",
             f"UPDATE {s}.saga_runs SET pod_uid = 'pod-z', owner = 'pod-z' WHERE run_id = %s",
             (OWN,)),
            ("move the own Proposed correction to Silent",
             f"UPDATE {s}.corrections SET state = 'Silent' WHERE run_id = %s", (OWN,)),
            ("mark the own step compensated",
             f"UPDATE {s}.saga_log SET status = 'COMPENSATED', comp_status = 'DONE'"
             " WHERE run_id = %s AND step_idx = 0", (OWN,))):
        try:
            with conn.transaction():
                conn.execute(statement, params)
            wrong.append(f"{name}: not refused")
        except psycopg.errors.InsufficientPrivilege:
            pass
    return wrong


def _schema(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
    assert row is not None
    return str(row[0])


def test_temporary_tables_named_after_everything_the_functions_read(
        world: tenant_world.Credentials, record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    names = sorted({*cat.names_read, *cat.tables})
    assert {"agentsaga_credentials", "pg_roles", "pg_class", "step_settlements"} <= set(names)
    role = roles.namespace_role(A, "sidecar")
    with psycopg.connect(world.a_sidecar, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("CREATE TEMP TABLE agentsaga_credentials (x INT)")
    with psycopg.connect(world.admin, autocommit=True) as admin:  # for this test only
        admin.execute(sql.SQL("GRANT TEMPORARY ON DATABASE {} TO {}").format(
            sql.Identifier(str(admin.info.dbname)), sql.Identifier(role)))
    before = tenant_world.snapshot(world.admin)
    with psycopg.connect(world.a_sidecar, autocommit=True) as conn:
        whole = _shadow(conn, names, cat.schema, "pg_temp")
        assert {"agentsaga_credentials", "pg_roles", "step_settlements"} <= set(whole)
        assert conn.execute("SELECT namespace FROM agentsaga_credentials").fetchall() == [(B,)]
        wrong = _still_refused(conn, cat.schema)
    record_property("tally: names shadowed by temporary tables", len(names))
    assert wrong == []
    assert tenant_world.snapshot(world.admin) == before


def test_a_schema_first_in_the_search_path_with_same_named_tables_and_functions(
        world: tenant_world.Credentials, record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    names = sorted({*cat.names_read, *cat.tables})
    with psycopg.connect(world.admin, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA attacker")
        _shadow(admin, names, cat.schema, "attacker")
        for statement in HOSTILE_FUNCTIONS:
            admin.execute(statement.format(s="attacker"))
        for role in (roles.namespace_role(A, "sidecar"), roles.namespace_role(A, "job")):
            admin.execute(sql.SQL("GRANT USAGE ON SCHEMA attacker TO {}").format(
                sql.Identifier(role)))
            admin.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA attacker TO {}").format(
                sql.Identifier(role)))
    before = tenant_world.snapshot(world.admin)
    with psycopg.connect(world.a_sidecar, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path = attacker, pg_catalog, {}, pg_temp").format(
            sql.Identifier(cat.schema)))
        # the session itself resolves to the attacker's objects: the functions must not
        assert conn.execute("SELECT agentsaga_caller_namespace()").fetchone() == (B,)
        assert conn.execute("SELECT pg_has_role('nobody', 0::oid, 'x')").fetchone() == (True,)
        wrong = _still_refused(conn, cat.schema)
    record_property("tally: names shadowed by a schema first in the path",
                    len(names) + len(HOSTILE_FUNCTIONS))
    assert wrong == []
    assert tenant_world.snapshot(world.admin) == before
