"""The saga log's connections: two pools (durable writes and reads; asynchronous outcome
commits), waiting for Postgres at start, and the translation of a lost database into the
project's own error (`LogUnavailable`) at the one place where connections are taken."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from agentsaga.errors import (
    ConfigurationError,
    DatabaseRefused,
    DatabaseUnavailable,
    LogRefused,
    LogUnavailable,
    RunsBounded,
)

logger = logging.getLogger(__name__)

Connection = psycopg.Connection[tuple[Any, ...]]


def _session(synchronous_commit: str) -> Callable[[Connection], None]:
    """A pool's `configure`: statements prepared on first use, the session's commit mode."""
    def configure(conn: Connection) -> None:
        conn.prepare_threshold = 0
        conn.execute(f"SET synchronous_commit TO {synchronous_commit}")
    return configure


_URL_SCHEMES = ("postgresql://", "postgres://")


def misread_password(dsn: str) -> bool:
    """Whether a URL DSN looks like its password holds an unescaped '/' or '@': libpq ends the
    password there and reads the rest as the host, the port or the database
    (postgresql://u:pa/ss@db/app is host `u`, port `pa`, database `ss@db/app`). A host never
    holds an '@', and a database name rarely does, so one in either is taken as the sign."""
    if not dsn.lower().startswith(_URL_SCHEMES):
        return False
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return False
    return "@" in str(info.get("host") or "") + str(info.get("dbname") or "")


def _location(dsn: str) -> dict[str, Any] | None:
    """The host, port and database of a DSN for messages, never anything of its userinfo (user,
    password); None when it cannot be read. When libpq would misread the password
    (`misread_password`), only what follows the DSN's last '@' is read: a password, however
    written, ends before it."""
    try:
        info = conninfo_to_dict(dsn)
        if misread_password(dsn):
            scheme = dsn[:dsn.index("://") + 3]
            info = conninfo_to_dict(scheme + dsn.rpartition("@")[2])
    except psycopg.ProgrammingError:
        return None
    return {k: info.get(k) for k in ("host", "port", "dbname")}


def where(dsn: str) -> str:
    """host:port/dbname of a DSN, for messages (never its user or password)."""
    info = _location(dsn)
    if info is None:
        return "an unparsable DSN"
    return f"{info['host'] or 'localhost'}:{info['port'] or 5432}/{info['dbname'] or ''}"


def describe(dsn: str) -> str:
    """'the database agentsaga on db.example:5432', for messages (never its user or
    password)."""
    info = _location(dsn)
    if info is None:
        return "the configured database"
    return (f"the database {info['dbname'] or '(default)'} on {info['host'] or 'localhost'}:"
            f"{info['port'] or 5432}")


def misread_password_error(dsn: str) -> ConfigurationError:
    """What a DSN whose password libpq misreads (`misread_password`) gets instead of a wait and
    of libpq's own message, which would quote the pieces of the password it took for a host."""
    return ConfigurationError(
        f"cannot connect to the saga log's Postgres at {where(dsn)}: its DSN looks like the "
        "password holds an unescaped '/' or '@', where Postgres ends the password and reads "
        "the rest as the host or the database. Percent-encode them in the password ('/' as "
        "%2F, '@' as %40: postgresql://user:pa%2Fss@host:5432/dbname), and an '@' in the "
        "database name as %40 too. Nothing was called.")


def with_user(dsn: str, user: str) -> str:
    """`dsn` as another database user (the embedded Postgres trusts its local users)."""
    params = conninfo_to_dict(dsn)
    params["user"] = user
    params.pop("password", None)
    return make_conninfo(**params)  # type: ignore[arg-type]


def check_dsn(dsn: str) -> None:
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise ConfigurationError(
            "the saga log's DSN (AGENTSAGA_DSN or --dsn) is malformed; use a URL such as "
            "postgresql://user:password@host:5432/dbname") from None


RUN_BOUND_SQLSTATE = "AS429"
"""What the trigger of migration 020 raises for a run beyond its namespace's bounds (its DETAIL:
the seconds to wait)."""


@contextmanager
def translated(dsn: str) -> Iterator[None]:
    """psycopg's 'the server is gone' as LogUnavailable; a run beyond its namespace's bounds
    as RunsBounded; any other database error (read-only after a failover, a missing privilege)
    as LogRefused: no psycopg error leaves the store."""
    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate == RUN_BOUND_SQLSTATE:
            raise run_bound(exc) from None
        raise translate(dsn, exc) from exc


def run_bound(exc: psycopg.Error) -> RunsBounded:
    """The trigger's refusal: its message, and its DETAIL as the seconds to wait."""
    try:
        wait = float(exc.diag.message_detail or "")
    except ValueError:
        wait = 1.0
    return RunsBounded(f"{exc.diag.message_primary or exc}; nothing was written",
                       retry_after_s=wait)


def translate(dsn: str, exc: psycopg.Error) -> LogUnavailable:
    """The project's error for a psycopg error (`translated`)."""
    if isinstance(exc, psycopg.OperationalError):
        return LogUnavailable(where(dsn), exc)
    return LogRefused(where(dsn), exc)


def refusal(dsn: str, connect_timeout: int) -> psycopg.OperationalError | None:
    """Why a Postgres that is up refuses `dsn` (a missing role or database, a wrong password,
    an invalid parameter), or None while the server may still be starting. libpq's ping tells
    the two apart without reading any message text: OK when the server answered, even if only
    to refuse the role; REJECT while it starts up or shuts down; NO_RESPONSE when nothing
    answered; NO_ATTEMPT for parameters that cannot work. A server that answers is tried once
    more, in case it finished starting between the two. (psycopg's ping holds the GIL while it
    waits: `connect_timeout` bounds it.)"""
    conninfo = make_conninfo(dsn, connect_timeout=connect_timeout)
    if pq.PGconn.ping(conninfo.encode()) not in (pq.Ping.OK, pq.Ping.NO_ATTEMPT):
        return None
    try:
        psycopg.connect(conninfo).close()
    except psycopg.OperationalError as exc:
        return exc
    return None


class Database:
    """The pools of one saga log. Thread-safe; share one per process."""

    def __init__(self, dsn: str, *, min_size: int = 2, max_size: int = 16,
                 async_outcomes: bool = True) -> None:
        self.dsn = dsn
        # The main pool's sessions commit durably (R2) whatever the server's default is.
        self.pool: ConnectionPool[Connection] = ConnectionPool(
            dsn, min_size=min_size, max_size=max_size, kwargs={"autocommit": True},
            configure=_session("on"), open=False, name="agentsaga")
        # Outcome writes with async outcomes: sessions that do not wait for the WAL flush, so
        # each outcome is one autocommit statement (no BEGIN / SET LOCAL / COMMIT round trips).
        self.outcome_pool: ConnectionPool[Connection] | None = None
        if async_outcomes:
            self.outcome_pool = ConnectionPool(
                dsn, min_size=1, max_size=max_size, kwargs={"autocommit": True},
                configure=_session("off"), open=False, name="agentsaga-outcomes")

    def open(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for Postgres while it may still be starting (nothing
        answers, or "the database system is starting up"), then open the pools;
        `DatabaseUnavailable` says why it could not. A server that answers and refuses the
        DSN's role, password or database is not waited for: `DatabaseRefused` at once."""
        check_dsn(self.dsn)
        deadline = time.monotonic() + timeout
        connect_timeout = max(1, int(timeout))
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=connect_timeout).close()
                break
            except psycopg.OperationalError as exc:
                if misread_password(self.dsn):  # libpq's reason would quote the password
                    raise misread_password_error(self.dsn) from None
                # the ping waits at most what is left of the wait (a host that never answers
                # has used the whole wait in the attempt already)
                left = max(1, min(connect_timeout, int(deadline - time.monotonic())))
                refused = refusal(self.dsn, left)
                if refused is not None:
                    raise DatabaseRefused(where(self.dsn), refused) from None
                if time.monotonic() >= deadline:
                    raise DatabaseUnavailable(where(self.dsn), timeout, exc) from None
                logger.warning("waiting for the saga log's Postgres (%s): %s", where(self.dsn),
                               str(exc).strip().splitlines()[0])
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        with translated(self.dsn):
            self.pool.open(wait=True, timeout=timeout)
        if self.outcome_pool is not None:
            self.outcome_pool.open(wait=False)  # its first connection arrives meanwhile

    def close(self) -> None:
        if self.outcome_pool is not None:
            self.outcome_pool.close()
        self.pool.close()

    def check(self) -> None:
        """Drop broken connections (after a Postgres restart) so that the next use reconnects."""
        with translated(self.dsn):
            self.pool.check()
            if self.outcome_pool is not None:
                self.outcome_pool.check()

    @contextmanager
    def connection(self, *, durable: bool = True,
                   timeout: float | None = None) -> Iterator[Connection]:
        """An autocommit connection; `durable=False` takes one whose commits do not wait for
        the WAL flush (when the log has asynchronous outcomes); `timeout`: seconds to wait for
        one from the pool (None: the pool's default)."""
        pool = self.pool if durable or self.outcome_pool is None else self.outcome_pool
        with translated(self.dsn), pool.connection(timeout=timeout) as conn:
            yield conn

    @contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator[Connection]:
        """A transaction on the main pool. Every transaction there waits for the WAL flush at
        commit, even on a server whose default is asynchronous: its sessions are set so once
        each, when the pool opens them (`_session`), not by a statement per transaction;
        `durable` says that the caller relies on it (R2)."""
        with translated(self.dsn), self.pool.connection() as conn, conn.transaction():
            yield conn
