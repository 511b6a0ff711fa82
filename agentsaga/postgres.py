"""Where the saga log lives: a DSN, or an embedded Postgres (the `pgserver` wheel) by default."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from agentsaga.extras import require
from agentsaga.settings import Settings

logger = logging.getLogger(__name__)


def get_server(data_dir: Path, cleanup_mode: str | None = None) -> Any:
    """pgserver's server object for `data_dir` (started if it is not running)."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI): harmless here
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        require("demo", "pgserver",
                what="the embedded Postgres (used when no AGENTSAGA_DSN is set)")
        import pgserver

        return pgserver.get_server(data_dir, cleanup_mode=cleanup_mode)  # type: ignore[attr-defined]


def embedded_dsn(data_dir: Path) -> str:
    """Start (or reuse) a private Postgres server in `data_dir` and return its DSN.

    The server is shared by every process that asks for the same directory and keeps running
    while any of them is alive.
    """
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    dsn: str = get_server(data_dir).get_uri()
    logger.info("embedded Postgres in %s", data_dir)
    return dsn


def saga_log_dsn(settings: Settings) -> str:
    """The saga log's DSN: `settings.dsn` (AGENTSAGA_DSN or --dsn), else an embedded Postgres
    under `settings.data_dir`."""
    return settings.dsn or embedded_dsn(Path(settings.data_dir) / "pg")
