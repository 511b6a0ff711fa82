"""The demos' saga log: the database given (`--dsn`), or a throw-away embedded Postgres, migrated
as `agentsaga migrate` (a release's hook Job) would before any sidecar starts: sidecars never
migrate."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentsaga.store import SagaLog


@contextmanager
def demo_database(dsn: str | None, workdir: Path) -> Iterator[str]:
    """Yield the DSN of a migrated saga log: `dsn`, or an embedded Postgres in `workdir/pg`
    that is stopped afterwards."""
    embedded = workdir / "pg"
    if dsn is None:
        from agentsaga.store.postgres import embedded_dsn
        dsn = embedded_dsn(embedded)
    try:
        SagaLog(dsn, min_size=1, max_size=1).open(migrate=True).close()
        yield dsn
    finally:
        if embedded.exists():
            from agentsaga.store.postgres import get_server
            get_server(embedded, cleanup_mode="stop").cleanup()
