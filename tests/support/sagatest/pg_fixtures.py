"""Real Postgres for the tests: embedded (pgserver) by default, or AGENTSAGA_TEST_DSN.

One server per test session; a template database carries the migrated schema, and every test
that asks for `pg` gets a fresh database cloned from it (fast, isolated). Sessions that share a
server may also share a template: AGENTSAGA_TEST_TEMPLATE names one already migrated there
(`make mutate` makes one for its thousands of short sessions; they neither create nor drop it).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentsaga.store import schema
from agentsaga.store.postgres import embedded_dsn, get_server

TEMPLATE = "agentsaga_template"
_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The admin DSN of the session's Postgres server."""
    dsn = os.environ.get("AGENTSAGA_TEST_DSN")
    if dsn:
        yield dsn
        return
    with tempfile.TemporaryDirectory(prefix="agentsaga-pg-", dir=in_memory()) as tmp:
        server = get_server(Path(tmp), cleanup_mode="stop")
        without_flushing(server.get_uri())
        yield server.get_uri()
        server.cleanup()


MEMORY = Path("/dev/shm")
MEMORY_NEEDED = 2 << 30
"""Bytes free in memory for a test server (a container's /dev/shm may hold 64 MiB only)."""


def in_memory() -> Path | None:
    """Where a throw-away server keeps its files: in memory where the machine has room for it
    (every test creates and drops a database, thousands of files a minute, and a disk's file
    system spends its time finding inodes for them), else the usual temporary folder."""
    try:
        return MEMORY if shutil.disk_usage(MEMORY).free >= MEMORY_NEEDED else None
    except OSError:
        return None


def without_flushing(server_dsn: str) -> None:
    """A throw-away test server never waits for the disk: the tests create and drop a database
    per test, and none of them outlives a power cut (a crash of Postgres alone loses nothing:
    the writes are in the kernel's cache)."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off")
        conn.execute("SELECT pg_reload_conf()")


def _with_db(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)  # type: ignore[arg-type]


def create_template(server_dsn: str, name: str) -> None:
    """A database `name` on the server with the migrated schema, to clone test databases from
    (replaced if it exists)."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(_with_db(server_dsn, name), autocommit=True) as conn:
        schema.migrate(conn)


@pytest.fixture(scope="session")
def pg_template(pg_server: str) -> Iterator[str]:
    """The migrated template of this session (one per process: sessions may share a server,
    as `make mutate`'s do), or the shared one AGENTSAGA_TEST_TEMPLATE names."""
    shared = os.environ.get("AGENTSAGA_TEST_TEMPLATE")
    if shared:
        yield shared
        return
    name = f"{TEMPLATE}_{os.getpid()}"
    create_template(pg_server, name)
    yield name
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _scratch_database(server_dsn: str, prefix: str, create: str = "") -> Iterator[str]:
    """A database of this test alone (`CREATE DATABASE name` + `create`), dropped after."""
    name = f"{prefix}_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} {create}")
    yield _with_db(server_dsn, name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg(pg_server: str, pg_template: str) -> Iterator[str]:
    """DSN of a fresh, migrated database for this test."""
    yield from _scratch_database(pg_server, "t", f"TEMPLATE {pg_template}")


@pytest.fixture
def pg_empty(pg_server: str) -> Iterator[str]:
    """DSN of a fresh database with nothing in it (no schema, as a new install finds it)."""
    yield from _scratch_database(pg_server, "e")


@pytest.fixture(scope="session")
def embedded_pg_dsn() -> str:
    """For code paths that must start the product's own embedded Postgres."""
    return embedded_dsn(Path(tempfile.mkdtemp(prefix="agentsaga-embedded-")))
