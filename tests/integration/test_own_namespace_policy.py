"""The row-level policy of a namespace's credentials (`roles.OWN_NAMESPACE`, the caller's
namespace read once per statement) allows exactly the run ids that migration 014's
`agentsaga_run_of_caller` allows, for every kind of credential and every shape of run id."""

from __future__ import annotations

import os

import psycopg

from agentsaga.store.connections import with_user
from agentsaga.store.provisioning import create_database
from agentsaga.store.roles import OWN_NAMESPACE

RUN_IDS = ["x", "a/x", "/x", "a/x/y", "b/x", "a/", "a", "a-b/x", "a_b/x", "", "/", "//",
           "a//x", "ab/x", "A/x", "a-b/x/y"]
ALLOWED = {"agentsaga_sidecar": ["x", "a", ""], "agentsaga_job": ["x", "a", ""],
           "agentsaga_ns_a": ["a/x", "a/"], "agentsaga_job_a": ["a/x", "a/"],
           "agentsaga_ns_a_b": ["a-b/x"], "agentsaga_operator": []}


def test_the_policy_allows_what_the_function_allows(pg_server: str) -> None:
    dsn = create_database(pg_server, f"own_namespace_{os.getpid()}", {"a": {}, "a-b": {}})
    row = OWN_NAMESPACE.replace("run_id", "v")
    for role, allowed in ALLOWED.items():
        with psycopg.connect(with_user(dsn, role), autocommit=True) as conn:
            rows = conn.execute(
                f"SELECT v, agentsaga_run_of_caller(v), COALESCE({row}, false)"
                " FROM unnest(%s::text[]) v", (RUN_IDS,)).fetchall()
        assert [r[0] for r in rows if r[2]] == allowed, role
        assert [r[0] for r in rows if r[1] != r[2]] == [], role


def test_a_role_with_no_credential_row_sees_nothing(pg_server: str) -> None:
    dsn = create_database(pg_server, f"own_namespace_none_{os.getpid()}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM agentsaga_credentials WHERE role_name = 'agentsaga_sidecar'")
        conn.execute("INSERT INTO saga_runs (run_id, namespace) VALUES ('x', ''), ('a/x', 'a')")
    with psycopg.connect(with_user(dsn, "agentsaga_sidecar"), autocommit=True) as conn:
        assert conn.execute("SELECT run_id FROM saga_runs").fetchall() == []
