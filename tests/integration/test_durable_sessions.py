"""Every transaction of the saga log's main pool commits durably (R2) on a server whose default
is asynchronous, by the setting its sessions get once when the pool opens them, not by a
statement per transaction; the outcome pool's sessions do not wait for the flush."""

from __future__ import annotations

import psycopg

from agentsaga.store import SagaLog


def test_the_main_pool_is_durable_and_the_outcome_pool_is_not(pg: str) -> None:
    with psycopg.connect(pg) as conn:  # the tests' server does not wait for the flush
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        db = saga_log.db
        for durable in (True, False):
            with db.transaction(durable=durable) as conn:
                assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        with db.connection(durable=True) as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        with db.connection(durable=False) as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
