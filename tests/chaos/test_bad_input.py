"""The bad-input catalogue: each kind gets a status code and a message naming what was wrong,
and nothing is written (no saga-log row, no run, no call of the real system).

Together with `tests/integration/test_sidecar.py::test_bad_requests_*` (unknown tool, non-object
and invalid JSON, oversized, empty and injection-looking run ids, never-begun and ended runs).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import psycopg
import pytest

from agentsaga.client import SagaClient
from agentsaga.v1 import sidecar_pb2 as pb
from sagatest.ledger_tools import calls
from sagatest.sidecar_fixtures import ROOT, SidecarProcess

TOOLS = "sagatest.ledger_tools"
TICKET = '{"summary": "Refund", "order_id": "1182"}'


@pytest.fixture
def sidecar(sidecar_factory: Callable[..., SidecarProcess], ledger: str) -> Iterator[SagaClient]:
    client = sidecar_factory(ledger, TOOLS).client()
    client.begin_run("ok-run")
    client.begin_run("done-run")
    client.end_run("done-run")
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute("INSERT INTO saga_runs (run_id, owner, pod_uid) VALUES"
                     " ('foreign-run', 'other-pod', 'uid-of-another-pod')")
    yield client


def state(dsn: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT count(*) FROM saga_log").fetchone()
        runs = conn.execute("SELECT run_id, state, owner_epoch, pivot FROM saga_runs"
                            " ORDER BY run_id").fetchall()
    assert rows is not None
    return rows[0], runs, len(calls(dsn))


DISPATCH_CASES = [
    ("unknown tool", "ok-run", "launch_rocket", "{}", "NOT_FOUND", "launch_rocket"),
    ("arguments are a JSON array", "ok-run", "create_ticket", "[1]", "INVALID_ARGUMENT",
     "JSON object"),
    ("arguments are JSON null", "ok-run", "create_ticket", "null", "INVALID_ARGUMENT",
     "JSON object"),
    ("arguments are a JSON string", "ok-run", "create_ticket", '"hi"', "INVALID_ARGUMENT",
     "JSON object"),
    ("malformed JSON", "ok-run", "create_ticket", "{summary: x", "INVALID_ARGUMENT",
     "not valid JSON"),
    ("an integer of 5,000 digits", "ok-run", "create_ticket",
     '{"summary": "s", "order_id": ' + "9" * 5000 + "}", "INVALID_ARGUMENT",
     "arguments cannot be read: Exceeds the limit (4300 digits)"),
    ("a run id ending in a newline", "ok-run\n", "create_ticket", '{}', "INVALID_ARGUMENT",
     "run id"),
    ("oversized arguments", "ok-run", "create_ticket",
     '{"summary": "' + "x" * (1 << 20) + '", "order_id": "1"}', "INVALID_ARGUMENT",
     "AGENTSAGA_MAX_ARGS_BYTES"),
    ("deeply nested arguments", "ok-run", "create_ticket",
     '{"summary": ' + "[" * 50000 + "]" * 50000 + ', "order_id": "1"}', "INVALID_ARGUMENT",
     "levels deep (AGENTSAGA_MAX_JSON_DEPTH); flatten them"),
    ("a key named twice", "ok-run", "create_ticket",
     '{"summary": "a", "order_id": "1", "order_id": "2"}', "INVALID_ARGUMENT",
     "the key 'order_id' appears twice in one JSON object"),
    ("a key named twice, nested", "ok-run", "create_ticket",
     '{"summary": "a", "order_id": "1", "meta": {"k": 1, "k": 2}}', "INVALID_ARGUMENT",
     "the key 'k' appears twice"),
    ("missing required argument", "ok-run", "create_ticket", '{"order_id": "1"}',
     "INVALID_ARGUMENT", "summary"),
    ("unexpected argument", "ok-run", "create_ticket",
     '{"summary": "a", "order_id": "1", "priority": "urgent"}', "INVALID_ARGUMENT", "priority"),
    ("agent-supplied idempotency key", "ok-run", "create_ticket",
     '{"summary": "a", "order_id": "1", "idempotency_key": "mine"}', "INVALID_ARGUMENT",
     "set by the harness"),
    ("wrong type: amount is not a number", "ok-run", "charge_card",
     '{"customer_id": "c", "amount": "five"}', "INVALID_ARGUMENT",
     "argument 'amount' must be an integer"),
    ("wrong type: amount is a fraction", "ok-run", "charge_card",
     '{"customer_id": "c", "amount": 1999.5}', "INVALID_ARGUMENT",
     "argument 'amount' must be an integer"),
    ("empty run id", "", "create_ticket", TICKET, "INVALID_ARGUMENT", "empty"),
    ("huge run id", "r" * 10_000, "create_ticket", TICKET, "INVALID_ARGUMENT",
     "characters long"),
    ("unicode run id", "rüñ-1182-☃", "create_ticket", TICKET, "INVALID_ARGUMENT",
     "characters outside"),
    ("injection-looking run id", "x'; DROP TABLE saga_log;--", "create_ticket", TICKET,
     "INVALID_ARGUMENT", "characters outside"),
    ("run id with a NUL and a newline", "a\x00b\nc", "create_ticket", TICKET,
     "INVALID_ARGUMENT", "characters outside"),
    ("path-looking run id", "../../etc/passwd", "create_ticket", TICKET, "INVALID_ARGUMENT",
     "characters outside"),
    ("run never begun", "never-begun", "create_ticket", TICKET, "FAILED_PRECONDITION",
     "BeginRun"),
    ("call on an ended run", "done-run", "create_ticket", TICKET, "FAILED_PRECONDITION",
     "ended"),
    ("call on a run bound to another pod", "foreign-run", "create_ticket", TICKET,
     "PERMISSION_DENIED", "another pod"),
]


@pytest.mark.parametrize(("kind", "run_id", "tool", "args_json", "code", "says"),
                         DISPATCH_CASES, ids=[c[0] for c in DISPATCH_CASES])
def test_bad_dispatch_is_refused_with_a_clear_error_and_writes_nothing(
        sidecar: SagaClient, ledger: str, kind: str, run_id: str, tool: str, args_json: str,
        code: str, says: str) -> None:
    before = state(ledger)
    with pytest.raises(grpc.RpcError) as error:
        sidecar.stub.Dispatch(pb.DispatchRequest(run_id=run_id, tool=tool, args_json=args_json))
    assert error.value.code() is getattr(grpc.StatusCode, code), error.value.details()
    assert says in (error.value.details() or "")
    assert state(ledger) == before


OTHER_CASES: list[tuple[str, Callable[[SagaClient], object], str, str]] = [
    ("GetRun of a foreign run", lambda c: c.get_run("foreign-run"), "PERMISSION_DENIED",
     "another pod"),
    ("GetRun of an unknown run", lambda c: c.get_run("nobody"), "FAILED_PRECONDITION",
     "has not begun"),
    ("BeginRun with an injection-looking id", lambda c: c.begin_run("a;b c"),
     "INVALID_ARGUMENT", "characters outside"),
    ("EndRun with an unknown outcome", lambda c: c.end_run("ok-run", "Maybe"),
     "INVALID_ARGUMENT", "Succeeded or Failed"),
    ("a commit plan that is not a list", lambda c: c.stub.ReachPivot(pb.ReachPivotRequest(
        run_id="ok-run", commit_plan_json='{"tool": "send_email"}')), "INVALID_ARGUMENT",
     "JSON list"),
    ("a commit plan naming a key twice", lambda c: c.stub.ReachPivot(pb.ReachPivotRequest(
        run_id="ok-run", commit_plan_json='[{"tool": "send_email", "tool": "send_correction", '
        '"args": {"to": "c@example.com", "body": "hi"}}]')), "INVALID_ARGUMENT",
     "the key 'tool' appears twice"),
    ("a commit plan naming an unknown tool", lambda c: c.reach_pivot(
        "ok-run", [{"tool": "launch_rocket", "args": {}}]), "NOT_FOUND", "launch_rocket"),
    ("a commit plan with non-object args", lambda c: c.reach_pivot(
        "ok-run", [{"tool": "send_email", "args": [1]}]), "INVALID_ARGUMENT", "commit step 0"),
]


@pytest.mark.parametrize(("kind", "call", "code", "says"), OTHER_CASES,
                         ids=[c[0] for c in OTHER_CASES])
def test_bad_request_to_other_rpcs_is_refused_and_writes_nothing(
        sidecar: SagaClient, ledger: str, kind: str, call: Callable[[SagaClient], object],
        code: str, says: str) -> None:
    before = state(ledger)
    with pytest.raises(grpc.RpcError) as error:
        call(sidecar)
    assert error.value.code() is getattr(grpc.StatusCode, code), error.value.details()
    assert says in (error.value.details() or "")
    assert state(ledger) == before


def test_request_rate_per_run_is_limited(sidecar_factory: Callable[..., SidecarProcess],
                                         ledger: str) -> None:
    client = sidecar_factory(ledger, TOOLS, env={"AGENTSAGA_MAX_CALLS_PER_S": "2"}).client()
    client.begin_run("busy-run")
    client.begin_run("quiet-run")
    codes = []
    for _ in range(6):
        try:
            client.dispatch("busy-run", "create_ticket", {"summary": "s", "order_id": "1"})
            codes.append("OK")
        except grpc.RpcError as exc:
            codes.append(exc.code().name)
            assert "AGENTSAGA_MAX_CALLS_PER_S" in (exc.details() or "")
    assert "RESOURCE_EXHAUSTED" in codes and codes[0] == "OK"
    assert len(calls(ledger)) == codes.count("OK")  # the refused calls reached nothing
    client.dispatch("quiet-run", "search_orders", {"order_id": "1"})  # other runs unaffected


def _approve(dsn: str, run_id: str, plan_hash: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "approve", "--dsn", dsn, "--run", run_id,
         "--plan-hash", plan_hash, "--decision", "Approved", "--approver", "alice"],
        capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize("kind", ["stale hash", "hash of another run"])
def test_bad_approval_is_refused_and_records_nothing(sidecar: SagaClient, ledger: str,
                                                     kind: str) -> None:
    plan = [{"tool": "send_email", "args": {"to": "c@example.com", "body": "hi"}}]
    first = sidecar.reach_pivot("ok-run", plan)
    sidecar.begin_run("other-run")
    other = sidecar.reach_pivot("other-run", plan + plan)
    before = state(ledger)
    wrong = "0" * 64 if kind == "stale hash" else other.plan_hash
    assert wrong != first.plan_hash
    done = _approve(ledger, "ok-run", wrong)
    assert done.returncode == 2
    assert "stale approval" in done.stderr and wrong in done.stderr
    assert state(ledger) == before


@pytest.mark.parametrize(("kind", "env", "args", "says"), [
    ("a setting that is not a number", {"AGENTSAGA_MAX_ARGS_BYTES": "lots"}, [],
     "AGENTSAGA_MAX_ARGS_BYTES must be a whole number, got 'lots'"),
    ("an unknown outcome-commit mode", {"AGENTSAGA_OUTCOME_COMMIT": "maybe"}, [],
     "AGENTSAGA_OUTCOME_COMMIT must be one of sync, async, group, got 'maybe'"),
    ("a tools module that does not exist", {}, ["--tools", "no.such.module"],
     "cannot import tools module 'no.such.module'"),
    ("a secret file that cannot be read",
     {"AGENTSAGA_STRIPE_API_KEY_FILE": "/nonexistent/stripe-key",
      "AGENTSAGA_STRIPE_API_BASE": "http://127.0.0.1:9"},
     ["--tools", "agentsaga.connectors.tools"], "AGENTSAGA_STRIPE_API_KEY_FILE"),
])
def test_corrupt_configuration_stops_the_sidecar_before_it_serves(
        ledger: str, kind: str, env: dict[str, str], args: list[str], says: str) -> None:
    import os

    full = {**os.environ, **env}
    done = subprocess.run(
        [sys.executable, "-m", "agentsaga.cli", "sidecar", "--listen", "127.0.0.1:0",
         "--dsn", ledger, *(args or ["--tools", TOOLS])],
        capture_output=True, text=True, cwd=ROOT, env=full, timeout=60)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "listening" not in done.stdout
    assert state(ledger)[0] == 0
