"""A pure tool's call (R2) on a real Postgres: the run is read once to see that it is open and
this pod's, then answered from the run's cursor while this process holds the run; a run ended
or taken over elsewhere is refused at the first call that writes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agentsaga.errors import Fenced, RunEnded
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import DispatchOutcome
from agentsaga.store import SagaLog
from sagatest import ledger_tools


class Counted(SagaLog):
    """The saga log, counting the reads a pure call may make."""

    reads = 0

    def run_and_newest(self, run_id: str) -> Any:
        self.reads += 1
        return super().run_and_newest(run_id)

    def run(self, run_id: str) -> Any:
        self.reads += 1
        return super().run(run_id)


@pytest.fixture
def service(pg: str, ledger: str) -> Iterator[SagaService]:
    saga_log = Counted(pg, min_size=1, max_size=4).open()
    yield SagaService(saga_log, ledger_tools.build_registry(), Settings(recheck_pause_s=0.01),
                      sleep=lambda _: None)
    saga_log.close()


def reads(service: SagaService) -> int:
    log = service.saga_log
    assert isinstance(log, Counted)
    return log.reads


def test_the_run_is_read_once_then_pure_calls_need_no_statement(service: SagaService) -> None:
    service.begin_run("pure-1")
    before = reads(service)
    for order in ("1181", "1182", "1183"):
        out = service.dispatch("pure-1", "search_orders", {"order_id": order})
        assert out.outcome == DispatchOutcome.CONFIRMED
        assert out.result == {"order_id": order, "status": "delivered"}
    assert reads(service) - before == 1


def test_a_run_ended_here_is_refused_to_a_pure_call(service: SagaService) -> None:
    service.begin_run("pure-2")
    service.dispatch("pure-2", "search_orders", {"order_id": "1181"})
    service.end_run("pure-2", "Failed")
    with pytest.raises(RunEnded):
        service.dispatch("pure-2", "search_orders", {"order_id": "1181"})


def test_a_run_ended_elsewhere_before_the_first_call_is_refused(service: SagaService,
                                                                pg: str) -> None:
    service.begin_run("pure-3")
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("UPDATE saga_runs SET state = 'failed', ended_at = now()"
                     " WHERE run_id = 'pure-3'")
    with pytest.raises(RunEnded):
        service.dispatch("pure-3", "search_orders", {"order_id": "1181"})


def test_a_run_taken_over_is_refused_at_the_next_side_effecting_call(
        service: SagaService, pg: str) -> None:
    service.begin_run("pure-4")
    service.dispatch("pure-4", "search_orders", {"order_id": "1181"})
    with psycopg.connect(pg, autocommit=True) as conn:  # another writer adopts it (R12)
        conn.execute("UPDATE saga_runs SET owner_epoch = owner_epoch + 1"
                     " WHERE run_id = 'pure-4'")
    # a pure call changes nothing anywhere; the first write under the old epoch is refused
    assert service.dispatch("pure-4", "search_orders",
                            {"order_id": "1182"}).outcome == DispatchOutcome.CONFIRMED
    with pytest.raises(Fenced):
        service.dispatch("pure-4", "charge_card", {"customer_id": "cus_1", "amount": 5})
    assert ledger_tools.calls(pg, "charge_card") == []
    assert ledger_tools.effects(pg, "charge") == []
