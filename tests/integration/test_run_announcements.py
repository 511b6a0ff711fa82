"""The operator hears every run the log announces (LISTEN on the runs' channel), also those
announced while it is busy with a round of its own: the rounds run on the listening connection,
so nothing is announced between two connections, where nobody listens. An announcement lost
so is never made again: a late call's effect on an ended run is announced once, and only a
new LISTEN connection's sweep would find it."""

from __future__ import annotations

import psycopg

from agentsaga.keys import log_run_id
from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user

BEFORE = log_run_id("default", "begun-once-listening")
DURING = log_run_id("default", "begun-during-a-round")


def test_a_run_announced_while_the_operator_runs_a_round_is_heard(pg: str) -> None:
    heard: list[str] = []
    rounds: list[bool] = []
    pids: set[int] = set()
    with SagaLog(pg, min_size=1, max_size=1).open() as writer, \
            SagaLog(with_user(pg, roles.OPERATOR), min_size=1, max_size=1).open(
                migrate=False) as operator:

        def listening() -> set[int]:
            with psycopg.connect(pg) as conn:
                return {int(r[0]) for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND query LIKE 'LISTEN %'")}

        def on_quiet(first: bool) -> None:
            rounds.append(first)
            pids.update(listening())
            if len(rounds) == 1:  # the LISTEN is in place when the first round begins
                writer.begin_run(BEFORE, agent="refunder", namespace="default")
            elif len(rounds) == 2:  # a round after a quiet interval, as the resync runs it
                writer.begin_run(DURING, agent="refunder", namespace="default")

        operator.listen_runs(heard.append, lambda: DURING in heard or len(rounds) > 20,
                             timeout=0.05, on_quiet=on_quiet)
    assert heard == [BEFORE, DURING]
    assert rounds == [True, False]
    assert len(pids) == 1  # one connection listened throughout
