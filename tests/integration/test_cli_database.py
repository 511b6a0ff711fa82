"""Where the commands find the saga log: one per-user embedded Postgres (whatever the current
directory), stopped by the last command that used it; read-only commands never create the
schema; AGENTSAGA_DB_WAIT_S bounds the wait for every command."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagatest.cli_tools import agentsaga
from sagatest.postgres_refusals import BAD_PASSWORD, STARTING_UP, refusing_postgres

UNREACHABLE = "postgresql://agentsaga@127.0.0.1:9/nothing"


def _empty_database(pg_server: str, name: str) -> str:
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(pg_server)
    params["dbname"] = name
    return make_conninfo(**params)  # type: ignore[arg-type]


def _tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return [r[0] for r in rows]


def test_embedded_postgres_is_per_user_and_stopped_by_the_command_that_started_it(
        tmp_path: Path) -> None:
    home = tmp_path / "xdg"
    env = {"XDG_DATA_HOME": str(home), "AGENTSAGA_DATA_DIR": "", "AGENTSAGA_DSN": ""}
    first, second = tmp_path / "project", tmp_path / "elsewhere"
    first.mkdir()
    second.mkdir()
    migrated = agentsaga("migrate", cwd=first, env=env)
    assert migrated.returncode == 0, migrated.stderr
    assert "applied: 001_saga_log.sql" in migrated.stdout
    pgdata = home / "agentsaga" / "pg"
    assert (pgdata / "PG_VERSION").exists()
    assert not (first / ".agentsaga").exists()
    assert not (pgdata / "postmaster.pid").exists(), "migrate left its Postgres running"
    # pgserver's and initdb's own output stays out of a command's output
    assert "initdb" not in migrated.stderr and "pg_ctl" not in migrated.stderr

    listed = agentsaga("runs", cwd=second, env=env)  # another folder: the same saga log
    assert listed.returncode == 0, listed.stderr
    assert "no runs in this saga log yet" in listed.stdout
    assert not (second / ".agentsaga").exists()
    assert not (pgdata / "postmaster.pid").exists(), "runs left its Postgres running"


def test_read_only_commands_on_a_database_without_the_schema_say_so_and_create_nothing(
        pg_server: str, tmp_path: Path) -> None:
    dsn = _empty_database(pg_server, "not_a_saga_log")
    for args in (["log", "--run", "mtg-1"], ["runs"],
                 ["approve", "--run", "mtg-1", "--plan-hash", "abc", "--decision", "approved"],
                 ["corrections", "--run", "mtg-1"],
                 ["reconcile", "--run", "mtg-1", "--tools", "agentsaga.connectors.tools"]):
        done = agentsaga(*args, "--dsn", dsn, cwd=tmp_path,
                         env={"AGENTSAGA_WAREHOUSE_URL": "http://127.0.0.1:9"})
        assert done.returncode == 2, (args, done.stderr)
        assert "the database not_a_saga_log on" in done.stderr, done.stderr
        assert "has no saga log" in done.stderr and "agentsaga migrate" in done.stderr
        assert _tables(dsn) == [], f"{args[0]} created tables"
    assert agentsaga("migrate", "--dsn", dsn, cwd=tmp_path).returncode == 0
    assert "saga_log" in _tables(dsn)


def test_every_command_waits_as_long_as_db_wait_says(tmp_path: Path) -> None:
    """The error states the wait it gave up after: the setting's, not the default 30 s."""
    for args in (["log", "--run", "x"], ["runs"], ["migrate"],
                 ["approve", "--run", "x", "--plan-hash", "h", "--decision", "Approved"],
                 ["reconcile", "--run", "x", "--tools", "agentsaga.connectors.tools"]):
        done = agentsaga(*args, "--dsn", UNREACHABLE, cwd=tmp_path,
                         env={"AGENTSAGA_DB_WAIT_S": "1",
                              "AGENTSAGA_WAREHOUSE_URL": "http://127.0.0.1:9"})
        assert done.returncode == 2, (args, done.stderr)
        assert "cannot reach the saga log's Postgres at 127.0.0.1:9/nothing after 1s" in (
            done.stderr), (args, done.stderr)


WAITING = "waiting for the saga log's Postgres"


def test_read_only_commands_on_a_fresh_embedded_postgres_say_to_migrate_at_once(
        tmp_path: Path) -> None:
    """No `agentsaga migrate` yet: the embedded server is up but has no agentsaga_sidecar
    role. That is not a server still starting: no 30 s of retries, the advice at once."""
    env = {"AGENTSAGA_DATA_DIR": str(tmp_path / "data"), "AGENTSAGA_DSN": "",
           "AGENTSAGA_DB_WAIT_S": "30"}
    for args in (["runs"], ["log", "--run", "mtg-1"], ["corrections", "--run", "mtg-1"]):
        started = time.monotonic()
        done = agentsaga(*args, cwd=tmp_path, env=env)
        took = time.monotonic() - started
        assert done.returncode == 2, (args, done.stderr)
        assert f"the embedded Postgres in {tmp_path / 'data' / 'pg'} has no saga log yet" in (
            done.stderr), done.stderr
        assert 'role "agentsaga_sidecar" does not exist' in done.stderr
        assert "Run `agentsaga migrate` first" in done.stderr
        assert WAITING not in done.stderr, "it retried a refusal as if Postgres were starting"
        assert took < 20, f"{args[0]} took {took:.0f}s"
    assert agentsaga("migrate", cwd=tmp_path, env=env).returncode == 0
    listed = agentsaga("runs", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr


@pytest.mark.parametrize("change", [{"user": "nobody_here"}, {"dbname": "no_such_db"}])
def test_a_dsn_whose_role_or_database_is_missing_fails_at_once(
        pg_server: str, tmp_path: Path, change: dict[str, str]) -> None:
    params = conninfo_to_dict(pg_server)
    params.update(change)
    dsn = make_conninfo(**params)  # type: ignore[arg-type]
    started = time.monotonic()
    done = agentsaga("runs", "--dsn", dsn, cwd=tmp_path, env={"AGENTSAGA_DB_WAIT_S": "30"})
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 20
    assert "is up but refused the connection" in done.stderr, done.stderr
    assert f'"{next(iter(change.values()))}" does not exist' in done.stderr
    assert "run `agentsaga migrate` first" in done.stderr
    assert "check the role, password and database name in the DSN" in done.stderr
    assert WAITING not in done.stderr


def test_a_wrong_password_fails_at_once(tmp_path: Path) -> None:
    with refusing_postgres(BAD_PASSWORD) as dsn:
        done = agentsaga("log", "--run", "x", "--dsn", dsn, cwd=tmp_path,
                         env={"AGENTSAGA_DB_WAIT_S": "30"}, timeout=20)
    assert done.returncode == 2, done.stderr
    assert "is up but refused the connection" in done.stderr, done.stderr
    assert "password authentication failed" in done.stderr
    assert WAITING not in done.stderr


def test_a_server_that_is_still_starting_is_waited_for(tmp_path: Path) -> None:
    """57P03, "the database system is starting up": waited for, up to AGENTSAGA_DB_WAIT_S."""
    with refusing_postgres(STARTING_UP) as dsn:
        started = time.monotonic()
        done = agentsaga("runs", "--dsn", dsn, cwd=tmp_path, env={"AGENTSAGA_DB_WAIT_S": "2"})
        took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert took >= 2, f"gave up after {took:.1f}s"
    assert WAITING in done.stderr
    assert "after 2s" in done.stderr and STARTING_UP.message in done.stderr, done.stderr


@pytest.mark.parametrize("password", ["Secr3t/Tail", "Secr3t@Tail", "Secr3t/Mid@Tail"])
def test_a_password_with_an_unescaped_slash_or_at_is_never_printed(tmp_path: Path,
                                                                    password: str) -> None:
    """libpq ends the password at an unescaped '/' or '@' and takes the rest for the host, port
    or database: no piece of it is printed, and the message says to percent-encode it."""
    dsn = f"postgresql://saga:{password}@127.0.0.1:9/app"
    done = agentsaga("runs", "--dsn", dsn, cwd=tmp_path, env={"AGENTSAGA_DB_WAIT_S": "30"},
                     timeout=20)
    assert done.returncode == 2, done.stderr
    for piece in ("Secr3t", "Mid", "Tail"):
        assert piece not in done.stdout + done.stderr, f"{piece!r} of the password was printed"
    assert "at 127.0.0.1:9/app" in done.stderr, done.stderr
    assert "password holds an unescaped '/' or '@'" in done.stderr
    assert "Percent-encode them in the password ('/' as %2F, '@' as %40" in done.stderr


def test_a_percent_encoded_password_connects(pg: str, tmp_path: Path) -> None:
    """The advice works: the same password, percent-encoded (the test server trusts its local
    users, so any password connects once the DSN is read right)."""
    params = conninfo_to_dict(pg)
    dsn = (f"postgresql://{params['user']}:Secr3t%2FTa%40il@/{params['dbname']}"
           f"?host={params['host']}&port={params.get('port') or 5432}")
    done = agentsaga("runs", "--dsn", dsn, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no runs in this saga log yet" in done.stdout
