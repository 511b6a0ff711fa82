"""The tenant boundary by construction, read from Postgres's catalog rather than shown by
examples: every function the schema defines pins its search_path (pg_catalog first, pg_temp
last), and no tenant role (the base roles and every namespace's credentials) holds a
privilege it should not: TEMPORARY, CREATE anywhere, a membership it could SET ROLE to, a role
attribute, an object of its own, a table privilege beyond `roles.GRANTS`, a sequence's
position; each has its connection limit and timeouts. A function or privilege added later is
checked without a change here. The counts are printed at the end of the session
(`tally: ...`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentsaga.store import roles
from sagatest import tenant_world

TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
ATTRIBUTES = ("rolsuper", "rolcreaterole", "rolcreatedb", "rolbypassrls", "rolreplication")
TIMEOUTS = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")


@pytest.fixture
def world(pg: str) -> tenant_world.Credentials:
    return tenant_world.build(pg)


def tenant_roles(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """role -> its base role, for every tenant role of the database."""
    found = {roles.SIDECAR: roles.SIDECAR, roles.JOB: roles.JOB}
    for role, (_, kind) in roles.credentials(conn).items():
        found[role] = roles.SIDECAR if kind == "sidecar" else roles.JOB
    return found


def pinned(config: list[str] | None, schema: str) -> bool:
    """Whether a function's settings (pg_proc.proconfig) pin search_path to pg_catalog first,
    the schema, and pg_temp last."""
    paths = [c.split("=", 1)[1] for c in config or [] if c.startswith("search_path=")]
    if len(paths) != 1:
        return False
    path = [p.strip().strip('"') for p in paths[0].split(",")]
    return path[0] == "pg_catalog" and path[-1] == "pg_temp" and schema in path[1:-1]


def test_every_function_of_the_schema_pins_its_search_path(
        pg: str, record_property: Callable[[str, object], None]) -> None:
    with psycopg.connect(pg) as conn:
        [(schema,)] = conn.execute("SELECT current_schema()").fetchall()
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig, p.prosecdef FROM pg_proc p"
            " WHERE p.pronamespace = current_schema()::regnamespace AND NOT EXISTS ("
            "  SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass"
            "  AND d.objid = p.oid AND d.deptype = 'e') ORDER BY 1").fetchall()
    unpinned = [f"{name} (settings {config})" for name, config, _ in functions
                if not pinned(config, str(schema))]
    record_property("tally: functions checked for a pinned search_path", len(functions))
    assert len(functions) >= 10  # the migrations' functions are there to check
    assert unpinned == [], ("functions without SET search_path = pg_catalog, <schema>, pg_temp:"
                            f" {unpinned}")


def test_the_pinning_check_refuses_what_it_should() -> None:
    assert pinned(["search_path=pg_catalog, public, pg_temp"], "public")
    for config in (None, [], ["search_path=public, pg_temp"], ["search_path=pg_catalog, public"],
                   ["search_path=pg_catalog, pg_temp"], ["search_path=pg_temp, public, pg_catalog"],
                   ["search_path=pg_catalog, attacker, pg_temp"]):
        assert not pinned(config, "public"), config


def _granted(role: str, table: str, privilege: str) -> bool:
    """Whether roles.GRANTS gives `role` `privilege` on `table` (whole or some columns)."""
    return any(g.split(" ", 1)[0] == privilege for g in roles.GRANTS.get(table, {}).get(role, ()))


def test_no_tenant_role_holds_a_privilege_it_should_not(
        world: tenant_world.Credentials, record_property: Callable[[str, object], None]) -> None:
    checked = 0
    wrong: list[str] = []

    def expect(held: object, what: str, allowed: bool = False) -> None:
        nonlocal checked
        checked += 1
        if bool(held) and not allowed:
            wrong.append(what)

    with psycopg.connect(world.admin) as conn:
        tenants = tenant_roles(conn)
        schemas = [str(r[0]) for r in conn.execute("SELECT nspname FROM pg_namespace ORDER BY 1")]
        every_role = [str(r[0]) for r in conn.execute("SELECT rolname FROM pg_roles ORDER BY 1")]
        tables = tenant_world.schema_tables(conn)
        sequences = tenant_world.schema_sequences(conn)
        for role, base in tenants.items():
            def ask(query: str, *params: object) -> Any:
                row = conn.execute(query, params).fetchone()
                assert row is not None
                return row[0]
            for privilege in ("TEMPORARY", "CREATE"):
                expect(ask("SELECT has_database_privilege(%s, current_database(), %s)", role,
                           privilege), f"{role}: {privilege} on the database")
            for schema in schemas:
                expect(ask("SELECT has_schema_privilege(%s, %s, 'CREATE')", role, schema),
                       f"{role}: CREATE on schema {schema}")
            for other in every_role:
                if other == role:
                    continue
                expect(ask("SELECT pg_has_role(%s, %s, 'SET')", role, other),
                       f"{role}: may SET ROLE {other}")
                expect(ask("SELECT pg_has_role(%s, %s, 'MEMBER')", role, other),
                       f"{role}: member of {other}", allowed=other == base)
            for attribute in ATTRIBUTES:
                expect(ask(sql.SQL("SELECT {} FROM pg_roles WHERE rolname = %s").format(
                    sql.Identifier(attribute)).as_string(conn), role), f"{role}: {attribute}")
            expect(ask("SELECT count(*) FROM pg_shdepend WHERE refclassid = 'pg_authid'::regclass"
                       " AND refobjid = to_regrole(%s) AND deptype = 'o'", role),
                   f"{role}: owns objects")
            for table in tables:
                for privilege in TABLE_PRIVILEGES:
                    whole = ask("SELECT has_table_privilege(%s, %s, %s)", role, table, privilege)
                    some = privilege in ("SELECT", "INSERT", "UPDATE", "REFERENCES") and ask(
                        "SELECT has_any_column_privilege(%s, %s, %s)", role, table, privilege)
                    expect(whole or some, f"{role}: {privilege} on {table}",
                           allowed=_granted(base, table, privilege))
            for sequence in sequences:
                for privilege in ("SELECT", "UPDATE"):
                    expect(ask("SELECT has_sequence_privilege(%s, %s, %s)", role, sequence,
                               privilege), f"{role}: {privilege} on sequence {sequence}")
            limit = ask("SELECT rolconnlimit FROM pg_roles WHERE rolname = %s", role)
            expect(limit < 0, f"{role}: no connection limit")
            settings = ask("SELECT COALESCE(array_agg(s), '{}') FROM pg_db_role_setting d,"
                           " unnest(d.setconfig) s WHERE d.setrole = to_regrole(%s)"
                           " AND d.setdatabase = 0", role)
            for timeout in TIMEOUTS:
                expect(not any(s.startswith(timeout + "=") for s in settings),
                       f"{role}: no {timeout}")
    record_property("tally: tenant privileges checked", checked)
    record_property("tally: tenant roles checked", len(tenants))
    assert len(tenants) == 6  # both base roles, and two namespaces' two credentials
    assert wrong == []
