"""One settings object, built from `AGENTSAGA_*` environment variables and passed explicitly."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from agentsaga.errors import ConfigurationError
from agentsaga.postgres import default_data_dir

OutcomeCommit = Literal["sync", "async"]


@dataclass(frozen=True)
class Settings:
    dsn: str | None = None
    """Postgres DSN of the saga log (AGENTSAGA_DSN). None: an embedded Postgres is started."""
    data_dir: Path = field(default_factory=default_data_dir)
    """Where the embedded Postgres keeps its files (AGENTSAGA_DATA_DIR; default: the per-user
    `$XDG_DATA_HOME/agentsaga`, i.e. `~/.local/share/agentsaga`, whatever the current
    directory)."""
    listen: str = "127.0.0.1:50051"
    """Sidecar address (AGENTSAGA_LISTEN): host:port, or unix:/path for a unix socket."""
    tools: tuple[str, ...] = ()
    """Python modules that register the tools (AGENTSAGA_TOOLS, comma-separated)."""
    recheck_pause_s: float = 2.0
    """R7: pause before re-checking an empty lookup (AGENTSAGA_RECHECK_PAUSE_S)."""
    max_args_bytes: int = 1 << 20
    """Largest accepted arguments JSON (AGENTSAGA_MAX_ARGS_BYTES)."""
    outcome_commit: OutcomeCommit = "async"
    """How outcome writes commit (AGENTSAGA_OUTCOME_COMMIT): `async` skips the WAL flush wait,
    which is safe because a lost outcome leaves the INTENDED row that reconcile settles; the
    INTENDED write is always durable (R2)."""
    db_wait_s: float = 30.0
    """How long to wait for Postgres at start (AGENTSAGA_DB_WAIT_S): it may still be starting."""
    pool_min: int = 2
    pool_max: int = 16
    """Connection pool bounds (AGENTSAGA_POOL_MIN / AGENTSAGA_POOL_MAX)."""
    workers: int = 32
    """gRPC worker threads (AGENTSAGA_WORKERS)."""
    pod_name: str = ""
    pod_namespace: str = ""
    pod_uid: str = ""
    """The pod this sidecar serves (downward API: AGENTSAGA_POD_NAME/_NAMESPACE/_UID)."""
    irreversible_before_pivot: Literal["refuse", "count"] = "refuse"
    """R10 policy for irreversible calls before the pivot (AGENTSAGA_IRREVERSIBLE_BEFORE_PIVOT)."""
    max_calls_per_s: float = 50.0
    """Tool calls one run may make per second through a sidecar (AGENTSAGA_MAX_CALLS_PER_S);
    more are refused with RESOURCE_EXHAUSTED before anything is written. 0 turns it off."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        base = cls()

        def number(name: str, default: float, *, minimum: float = 0) -> float:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ConfigurationError(f"{name}={raw!r} is not a number") from None
            if value < minimum:
                raise ConfigurationError(f"{name}={raw!r} must be at least {minimum}")
            return value

        commit = env.get("AGENTSAGA_OUTCOME_COMMIT", base.outcome_commit)
        if commit not in ("sync", "async"):
            raise ConfigurationError(f"AGENTSAGA_OUTCOME_COMMIT={commit!r}: use sync or async")
        policy = env.get("AGENTSAGA_IRREVERSIBLE_BEFORE_PIVOT", base.irreversible_before_pivot)
        if policy not in ("refuse", "count"):
            raise ConfigurationError(
                f"AGENTSAGA_IRREVERSIBLE_BEFORE_PIVOT={policy!r}: use refuse or count"
            )
        tools = tuple(t.strip() for t in env.get("AGENTSAGA_TOOLS", "").split(",") if t.strip())
        return cls(
            dsn=env.get("AGENTSAGA_DSN") or None,
            data_dir=Path(env.get("AGENTSAGA_DATA_DIR") or default_data_dir(env)),
            listen=env.get("AGENTSAGA_LISTEN", base.listen),
            tools=tools,
            recheck_pause_s=number("AGENTSAGA_RECHECK_PAUSE_S", base.recheck_pause_s),
            max_args_bytes=int(number("AGENTSAGA_MAX_ARGS_BYTES", base.max_args_bytes, minimum=2)),
            outcome_commit=commit,  # type: ignore[arg-type]
            db_wait_s=number("AGENTSAGA_DB_WAIT_S", base.db_wait_s),
            pool_min=int(number("AGENTSAGA_POOL_MIN", base.pool_min, minimum=1)),
            pool_max=int(number("AGENTSAGA_POOL_MAX", base.pool_max, minimum=1)),
            workers=int(number("AGENTSAGA_WORKERS", base.workers, minimum=1)),
            pod_name=env.get("AGENTSAGA_POD_NAME", ""),
            pod_namespace=env.get("AGENTSAGA_POD_NAMESPACE", ""),
            pod_uid=env.get("AGENTSAGA_POD_UID", ""),
            irreversible_before_pivot=policy,  # type: ignore[arg-type]
            max_calls_per_s=number("AGENTSAGA_MAX_CALLS_PER_S", base.max_calls_per_s),
        )

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]


def read_secret(env: Mapping[str, str], name: str) -> str | None:
    """A credential from `NAME_FILE` (a mounted Secret) or `NAME`; never logged."""
    path = env.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigurationError(
                f"{name}_FILE={path!r} cannot be read: {exc.strerror}"
            ) from None
    return env.get(name) or None
