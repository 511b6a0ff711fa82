"""R7 with consistent lookups, on the world, real Postgres and the real `stripe` SDK: where the
real system has a consistent read (Stripe's list by `created` window then retrieve by id, Jira's
GET by a known id), an effect is found at once and an absence is certain at the call's
deadline, whatever the search index's lag. The world's search lag runs on a `ManualClock` that
these tests never advance: the search never catches up, so only a consistent read can answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from agentsaga.connectors.config import HttpSettings, StripeConfig
from agentsaga.connectors.stripe import LIST_PAGE, StripeConnector
from agentsaga.connectors.tools import register_all
from agentsaga.errors import OutcomeUnknown
from agentsaga.keys import step_key
from agentsaga.saga.registry import LookupContext, Registry
from agentsaga.saga.resolution import reconcile_run
from agentsaga.saga.resolution_report import ResolutionReport
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import DispatchOutcome, StepStatus
from agentsaga.store import SagaLog
from agentsaga_lab.demo.world import connector_env
from agentsaga_lab.world import Fault, ManualClock, World
from sagatest.stripe_world import authorise, client

CHARGE = {"customer_id": "cus_1", "amount": 1500, "order_id": "1182"}
TICKET = {"summary": "Refund for order 1182", "order_id": "1182"}
NEVER = 3600.0
"""The world's search lag in these tests: an hour, on a clock that does not move."""
SEARCH = "GET /v1/payment_intents/search"
JQL = "POST /rest/api/3/search/jql"


@pytest.fixture
def saga_log(pg: str) -> Iterator[SagaLog]:
    log = SagaLog(pg, min_size=1, max_size=4).open()
    yield log
    log.close()


def tools(world: World, *, timeout_s: float = 2.0,
          contracts: dict[str, dict[str, float]] | None = None) -> Registry:
    env = connector_env(world.url, timeout_s=timeout_s)
    if contracts is not None:
        env["AGENTSAGA_TIME_CONTRACTS"] = json.dumps(contracts)
    return register_all(Registry(), env)


def no_pause(pauses: list[float]) -> Callable[[float], None]:
    def sleep(seconds: float) -> None:
        pauses.append(seconds)  # the re-check would be pointless: the clock does not move
    return sleep


def test_a_charge_whose_answer_was_lost_is_confirmed_at_once_while_search_lags(
        world: World, clock: ManualClock, saga_log: SagaLog) -> None:
    world.set_search_lag(NEVER)
    registry = tools(world)
    assert registry.get("charge_card").timing.visible_within_s == 0.0
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.05))
    service.begin_run("lost")
    world.faults.add(Fault("POST", "/v1/payment_intents", "commit_then_504", on_call=1))
    assert service.dispatch("lost", "charge_card", CHARGE).outcome == DispatchOutcome.UNKNOWN
    [intent] = world.truth()["payment_intents"]

    pauses: list[float] = []
    report = reconcile_run(saga_log, registry, "lost", "job", recheck_pause_s=5.0,
                           sleep=no_pause(pauses))
    assert report.settled and pauses == []  # found on the first look, no re-check
    [step] = saga_log.steps("lost")
    assert step.status == StepStatus.CONFIRMED and step.external_ref == intent["id"]
    assert step.result["metadata"]["saga_key"] == step_key("lost", 0, "charge_card")
    calls = world.truth()["calls"]
    assert calls.get(SEARCH, 0) == 0 and calls["POST /v1/payment_intents"] == 1


def test_the_agent_calling_again_gets_the_lost_charge_without_a_second_one(
        world: World, clock: ManualClock, saga_log: SagaLog) -> None:
    world.set_search_lag(NEVER)
    service = SagaService(saga_log, tools(world), Settings(recheck_pause_s=0.05))
    service.begin_run("again")
    world.faults.add(Fault("POST", "/v1/payment_intents", "commit_then_reset", on_call=1))
    assert service.dispatch("again", "charge_card", CHARGE).outcome == DispatchOutcome.UNKNOWN
    again = service.dispatch("again", "charge_card", CHARGE)
    [intent] = world.truth()["payment_intents"]
    assert again.outcome == DispatchOutcome.CONFIRMED and again.external_ref == intent["id"]
    assert world.truth()["calls"].get(SEARCH, 0) == 0


def test_a_charge_that_never_happened_is_not_executed_once_its_deadline_passes(
        world: World, clock: ManualClock, saga_log: SagaLog) -> None:
    """No lag is waited for: the step is certain at its deadline (visible_within_s 0)."""
    world.set_search_lag(NEVER)
    timeout_s = 0.5
    registry = tools(world, timeout_s=timeout_s)
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.05))
    service.begin_run("never")
    world.faults.add(Fault("POST", "/v1/payment_intents", "fail_before_commit_502", on_call=1))
    answer = service.dispatch("never", "charge_card", CHARGE)
    assert answer.outcome == DispatchOutcome.UNKNOWN
    assert answer.retry_after_s is not None and answer.retry_after_s <= timeout_s
    when = saga_log.certainty("never", 0)
    assert when is not None and when.deadline is not None
    assert when.certain_at == when.deadline  # nothing added for an index lag

    waited: list[float] = []

    def wait(seconds: float, report: ResolutionReport) -> None:
        waited.append(seconds)
        time.sleep(seconds)  # the harness's own retry-after; reconcile re-reads the db clock

    report = reconcile_run(saga_log, registry, "never", "job", recheck_pause_s=0.01, wait=wait)
    assert report.settled
    assert [s.status for s in saga_log.steps("never")] == [StepStatus.NOT_EXECUTED]
    assert sum(waited) <= timeout_s + 0.1  # at most the deadline, never the search lag
    ended = saga_log.step("never", 0)
    assert ended is not None and ended.updated_at >= when.deadline
    truth = world.truth()
    assert truth["payment_intents"] == [] and truth["calls"].get(SEARCH, 0) == 0


def test_a_ticket_whose_id_is_known_is_found_at_once_despite_the_search_lag(
        world: World, clock: ManualClock, saga_log: SagaLog) -> None:
    world.set_search_lag(NEVER)
    registry = tools(world, contracts={"create_ticket": {"visible_within_s": 600.0}})
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.05))
    service.begin_run("jira")
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))
    assert service.dispatch("jira", "create_ticket", TICKET).outcome == DispatchOutcome.UNKNOWN
    [ticket] = world.truth()["tickets"]

    blind = reconcile_run(saga_log, registry, "jira", "job-1", recheck_pause_s=0.01)
    assert not blind.settled and blind.wait_s is not None  # the search cannot see it yet
    searched = world.truth()["calls"][JQL]

    # the id becomes known to the log (stored on the still unknown row)
    epoch = saga_log.require_run("jira").owner_epoch
    saga_log.record_outcome("jira", epoch, 0, StepStatus.UNKNOWN, external_ref=ticket["key"],
                            error="the create answered 504; the issue's key is known")
    pauses: list[float] = []
    report = reconcile_run(saga_log, registry, "jira", "job-2", recheck_pause_s=5.0,
                           sleep=no_pause(pauses))
    assert report.settled and pauses == []
    [step] = saga_log.steps("jira")
    assert step.status == StepStatus.CONFIRMED and step.external_ref == ticket["key"]
    assert world.truth()["calls"][JQL] == searched  # read by id, not searched


def test_a_known_id_of_another_steps_ticket_is_not_taken_for_this_one(
        world: World, clock: ManualClock, saga_log: SagaLog) -> None:
    """The read by id checks the step's label: a wrong id falls back to the search."""
    world.set_search_lag(NEVER)
    registry = tools(world, contracts={"create_ticket": {"visible_within_s": 600.0}})
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01))
    service.begin_run("other")
    assert service.dispatch("other", "create_ticket", TICKET).outcome == "CONFIRMED"
    [other] = world.truth()["tickets"]
    service.begin_run("wrong")
    world.faults.add(Fault("POST", "/rest/api/3/issue", "fail_before_commit_502", on_call=1))
    assert service.dispatch("wrong", "create_ticket", TICKET).outcome == "UNKNOWN"
    epoch = saga_log.require_run("wrong").owner_epoch
    saga_log.record_outcome("wrong", epoch, 0, StepStatus.UNKNOWN, external_ref=other["key"])
    report = reconcile_run(saga_log, registry, "wrong", "job", recheck_pause_s=0.01)
    assert not report.settled
    assert [s.status for s in saga_log.steps("wrong")] == [StepStatus.UNKNOWN]


# -- the connector's listing, page by page --------------------------------------------------


@pytest.fixture
def stripe_conn(world: World) -> StripeConnector:
    return StripeConnector(StripeConfig("sk_test_x", world.url),
                           HttpSettings(timeout_s=5.0, search_rate=1000.0))


def _context(saga_log: SagaLog, key: str, *, window_s: float = 30.0) -> LookupContext:
    now = saga_log.db_now()
    return LookupContext(key, {}, now - timedelta(seconds=window_s),
                         now + timedelta(seconds=window_s))


def test_the_listing_pages_until_it_finds_the_key(world: World, clock: ManualClock,
                                                   saga_log: SagaLog,
                                                   stripe_conn: StripeConnector) -> None:
    world.set_search_lag(NEVER)
    sc = client(world)
    target = authorise(sc, "the-step")
    for i in range(LIST_PAGE + 20):  # newer ones come first: the target is on page 2
        authorise(sc, f"noise-{i}")
    found = stripe_conn.find_charges([_context(saga_log, "the-step"),
                                      _context(saga_log, "absent")])
    assert set(found) == {"the-step"} and found["the-step"].ref == target.id
    calls = world.truth()["calls"]
    assert calls["GET /v1/payment_intents"] == 2  # page 1, then starting_after: the last page
    assert calls.get(SEARCH, 0) == 0


def test_a_listing_cut_short_never_says_not_found(world: World, saga_log: SagaLog,
                                                  stripe_conn: StripeConnector) -> None:
    sc = client(world)
    for i in range(LIST_PAGE + 1):
        authorise(sc, f"noise-{i}")
    stripe_conn.list_pages = 1
    with pytest.raises(OutcomeUnknown, match="cannot tell"):
        stripe_conn.find_charges([_context(saga_log, "absent")])


def test_a_charge_outside_the_steps_window_is_not_its_effect(
        world: World, saga_log: SagaLog, stripe_conn: StripeConnector) -> None:
    """The window is the step's own: a PaymentIntent created long before its intent is not
    listed (the `created` filter), so the lookup reads only what the step could have made."""
    authorise(client(world), "k-old")
    later = saga_log.db_now() + timedelta(hours=1)
    ctx = LookupContext("k-old", {}, later, later + timedelta(seconds=5))
    assert stripe_conn.find_charges([ctx]) == {}
    assert stripe_conn.find_charges([_context(saga_log, "k-old")])["k-old"].ref is not None
