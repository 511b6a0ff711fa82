"""Where the saga log lives: a DSN, or an embedded Postgres (the `pgserver` wheel) by default.

The embedded server keeps its files in one directory per user, whatever the current directory:
`$AGENTSAGA_DATA_DIR/pg`, by default `$XDG_DATA_HOME/agentsaga/pg` (`~/.local/share/agentsaga/pg`).
Every process that uses it is counted; the last one to exit stops the server, so a one-shot
command (`agentsaga log`, `runs`, ...) that had to start it leaves nothing running, and one
started while a sidecar runs leaves the sidecar's server alone.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any, Literal

from agentsaga.extras import require
from agentsaga.settings import Settings
from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user

logger = logging.getLogger(__name__)

SYSTEM_USER = "pgserver"
"""The system user pgserver runs Postgres as when it is started by root (initdb refuses root)."""


def get_server(data_dir: Path, cleanup_mode: str | None = None) -> Any:
    """pgserver's server object for `data_dir` (started if it is not running)."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI): harmless here
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        require("embedded", "pgserver",
                what="the embedded Postgres (used when no AGENTSAGA_DSN is set)")
        import pgserver

        ensure_system_user()
        _forget_dead_users(data_dir)
        return pgserver.get_server(data_dir, cleanup_mode=cleanup_mode)  # type: ignore[attr-defined]


def embedded_dsn(data_dir: Path) -> str:
    """Start (or reuse) a private Postgres server in `data_dir` and return its DSN.

    The server is shared by every process that asks for the same directory; the last of them
    to exit stops it.
    """
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    dsn: str = get_server(data_dir, cleanup_mode="stop").get_uri()
    logger.debug("embedded Postgres in %s", data_dir)
    return dsn


Role = Literal["sidecar", "operator", "migrate"]
"""Which database role a process acts as (`agentsaga.store.roles`)."""


def saga_log_dsn(settings: Settings, role: Role = "sidecar") -> str:
    """The saga log's DSN for `role`: AGENTSAGA_OPERATOR_DSN / AGENTSAGA_MIGRATE_DSN for those
    roles, else `settings.dsn` (AGENTSAGA_DSN or --dsn), else the embedded Postgres in
    `settings.embedded_dir` (per user, whatever the current directory) as the role's database
    user (its superuser for the migration role)."""
    own = {"operator": settings.operator_dsn, "migrate": settings.migrate_dsn}.get(role)
    if own:
        return own
    if settings.dsn:
        return settings.dsn
    embedded = embedded_dsn(settings.embedded_dir)
    if role == "migrate":
        return embedded
    return with_user(embedded, roles.SIDECAR if role == "sidecar" else roles.OPERATOR)


def embedded_migrated(settings: Settings) -> bool:
    """For the embedded Postgres (no AGENTSAGA_DSN) only: migrate it as its superuser, so that
    a sidecar on a developer's machine finds its schema and roles; True if it did. A real
    database is migrated once per release by `agentsaga migrate` (the chart's hook Job)."""
    if settings.dsn:
        return False
    SagaLog(saga_log_dsn(settings, "migrate"), min_size=1, max_size=1,
            async_outcomes=False).open(migrate=True, timeout=settings.db_wait_s).close()
    return True


def ensure_system_user(name: str = SYSTEM_USER) -> None:
    """As root, pgserver runs Postgres as a system user that it creates with `useradd` the
    first time, unguarded: processes starting embedded servers at once on a machine that never
    ran one race on it (one `useradd` fails, or one `initdb` looks the user up while another
    process rewrites /etc/passwd). Create the user here, once, under a lock that every process
    takes, before pgserver looks; then pgserver finds it and creates nothing."""
    if os.geteuid() != 0:
        return
    # the temporary folder is looked up here, not at import: a container with a read-only root
    # and no /tmp (the chart's migration Job and retention CronJob) imports this module too
    with open(Path(tempfile.gettempdir()) / "agentsaga-pgserver-user.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "-s", "/bin/bash", name], check=True,
                           capture_output=True, text=True)
            pwd.getpwnam(name)  # raises if useradd said nothing and did nothing


def _forget_dead_users(data_dir: Path) -> None:
    """pgserver counts the processes using a server in `.handle_pids.json` and stops it when the
    last one exits; a process that was killed never takes itself off that list, and the server
    would then outlive everyone. Drop the ids of processes that are gone."""
    from pgserver.postgres_server import PostgresServer
    from pgserver.utils import DiskList

    users = DiskList(data_dir.resolve() / ".handle_pids.json")
    with PostgresServer._lock:
        alive = [pid for pid in users.get() if _alive(pid)]
        if alive != users.get():
            users.put(alive)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_embedded(data_dir: Path) -> None:
    """Stop the private server in `data_dir` now (`pg_ctl stop -m fast`), whoever else counted
    on it: for a process that made a throw-away server (the benchmark) and must not leave it
    running, even when a child process was killed before it could sign off."""
    require("embedded", "pgserver", what="the embedded Postgres")
    from pgserver._commands import POSTGRES_BIN_PATH

    pgdata = data_dir.resolve()
    if (pgdata / "postmaster.pid").exists():
        subprocess.run([str(POSTGRES_BIN_PATH / "pg_ctl"), "stop", "-D", str(pgdata), "-m",
                        "fast", "-w", "-t", "60"], check=False, capture_output=True,
                       timeout=90)
