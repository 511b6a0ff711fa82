"""Upstreams over stdio and over HTTP, through the saga service and unwind: the key where it is
declared (an argument, or the Idempotency-Key header), a compensation that reads the forward
call's result, found again by the declared lookup."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sagatest
from agentsaga.connectors.mcp import declarations
from agentsaga.connectors.mcp.registration import register_upstreams
from agentsaga.errors import (
    CompensationUnavailable,
    ConfigurationError,
    InvalidArguments,
    Rejected,
)
from agentsaga.saga.registry import Registry
from agentsaga.saga.resolution import unwind_run
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.sidecar.mcp_endpoint.serving import PATH, serve_app
from agentsaga.store import SagaLog
from sagatest.mcp_upstream_server import UPSTREAMS, build

SUPPORT = Path(sagatest.__file__).resolve().parent.parent  # tests/support


@pytest.fixture
def saga_log(pg: str) -> Iterator[SagaLog]:
    log = SagaLog(pg, min_size=1, max_size=4).open()
    yield log
    log.close()


@pytest.fixture
def things_url() -> Iterator[str]:
    """The test upstream over HTTP, served in this process."""
    app = build().streamable_http_app(streamable_http_path=PATH, json_response=True)
    serving = serve_app(app, "127.0.0.1", 0)
    yield serving.url
    serving.stop()


def _registry(tmp_path: Path, transport: str, key: str) -> Registry:
    path = tmp_path / "upstreams.yaml"
    path.write_text(UPSTREAMS.format(transport=transport, key=key))
    return register_upstreams(Registry(), declarations.load(path))[0]


def _state(registry: Registry) -> dict[str, Any]:
    return dict(registry.get("state").fn().result)


def test_a_stdio_upstream_is_keyed_by_argument_and_unwound_from_its_found_result(
        tmp_path: Path, saga_log: SagaLog) -> None:
    # an stdio server gets only a safe part of the environment: name where `sagatest` lives
    command = (f"command: [{sys.executable}, -m, sagatest.mcp_upstream_server]\n"
               f"    env: {{PYTHONPATH: {SUPPORT}}}")
    registry = _registry(tmp_path, command, '{argument: tag, value: "saga-{key}"}')
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0))
    service.begin_run("stdio-run")
    out = service.dispatch("stdio-run", "create_thing", {"name": "draft"})
    assert out.outcome == "CONFIRMED"
    assert out.result["tag"] == f"saga-{out.key}"  # R4: the key in the declared argument
    report = unwind_run(saga_log, registry, "stdio-run", recheck_pause_s=0)
    assert [c["compensation"] for c in report.compensated] == ["delete_thing"]
    state = _state(registry)
    assert state["things"] == []
    assert state["deleted"] == [{"id": out.external_ref, "name_was": "draft (was draft)",
                                 "request_id": state["deleted"][0]["request_id"]}]
    assert state["deleted"][0]["request_id"] != out.key  # the compensation's own key (R8)


def test_an_http_upstream_gets_the_key_in_the_idempotency_key_header(
        tmp_path: Path, saga_log: SagaLog, things_url: str) -> None:
    registry = _registry(tmp_path, f'url: "{things_url}"', "{header: Idempotency-Key}")
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0))
    service.begin_run("header-run")
    out = service.dispatch("header-run", "create_thing", {"name": "x", "tag": "t"})
    assert out.outcome == "CONFIRMED"
    assert _state(registry)["things"][0]["key_header"] == out.key


def test_a_compensation_that_could_not_be_filled_in_at_unwind_refuses_the_call(
        tmp_path: Path, saga_log: SagaLog, things_url: str) -> None:
    """A value that reads the forward result and an argument the call was not given: found
    missing only at unwind time, it would leave the effect uncompensated for good. The call is
    refused before anything is written or sent (R6); given the argument, it goes through, its
    compensation stored to be filled in at unwind time."""
    path = tmp_path / "upstreams.yaml"
    path.write_text(UPSTREAMS.format(transport=f'url: "{things_url}"',
                                     key="{header: Idempotency-Key}").replace(
        "(was {args.name})", "(was {args.name}, tag {args.tag})"))
    registry = register_upstreams(Registry(), declarations.load(path))[0]
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0))
    service.begin_run("comp-run")
    with pytest.raises(CompensationUnavailable) as refused:
        service.dispatch("comp-run", "create_thing", {"name": "x"})
    assert "{args.tag} has no value here" in str(refused.value)
    assert saga_log.steps("comp-run") == [] and _state(registry)["things"] == []
    out = service.dispatch("comp-run", "create_thing", {"name": "x", "tag": "t"})
    assert out.outcome == "CONFIRMED"
    [step] = saga_log.steps("comp-run")
    assert step.compensation is not None
    assert step.compensation["args"]["name_was"]["$deferred"] == (
        "{result.name} (was {args.name}, tag {args.tag})")


def test_an_upstream_tools_arguments_are_checked_against_its_listed_schema_before_the_intent(
        tmp_path: Path, saga_log: SagaLog, things_url: str) -> None:
    """R2 for a tool whose schema its server lists: a mistyped or missing argument is refused
    naming it, before anything is written or sent; the value quoted is masked."""
    registry = _registry(tmp_path, f'url: "{things_url}"', "{header: Idempotency-Key}")
    service = SagaService(saga_log, registry, Settings(recheck_pause_s=0))
    service.begin_run("schema-run")
    for args, says in (({"name": 5}, "argument 'name': 5 is not of type 'string'"),
                       ({"tag": "t"}, "argument '(arguments)': 'name' is a required"),
                       ({"name": "x", "tag": 4242424242424242},
                        "argument 'tag': [card ****4242] is not of type 'string'")):
        with pytest.raises(InvalidArguments) as refused:
            service.dispatch("schema-run", "create_thing", args)
        assert str(refused.value).startswith("tool 'create_thing': ")
        assert says in str(refused.value)
        assert "4242424242424242" not in str(refused.value)
    assert saga_log.steps("schema-run") == [] and _state(registry)["things"] == []
    assert service.dispatch("schema-run", "create_thing", {"name": "x"}).outcome == (
        "CONFIRMED")


def test_an_upstream_that_cannot_be_reached_says_why_and_a_call_to_it_sent_nothing(
        tmp_path: Path) -> None:
    """Nothing listens: registering says which upstream and the connection's own error (not a
    task group's), and a call is Rejected (nothing went out: FAILED, not UNKNOWN)."""
    from agentsaga.connectors.mcp.upstream import Upstream

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tmp_path / "upstreams.yaml"
    path.write_text(UPSTREAMS.format(transport=f'url: "http://127.0.0.1:{port}/mcp"',
                                     key="{header: Idempotency-Key}"))
    doc = declarations.load(path)
    with pytest.raises(ConfigurationError) as refused:
        register_upstreams(Registry(), doc)
    said = str(refused.value)
    assert said.startswith(f"cannot connect to the MCP upstream 'things' at "
                           f"http://127.0.0.1:{port}/mcp: ConnectError: ")
    assert "ExceptionGroup" not in said and "TaskGroup" not in said
    with pytest.raises(Rejected, match="nothing was sent, call again once it is back"):
        Upstream("things", doc.upstreams["things"]).call("create_thing", {"name": "x"},
                                                         timeout=5)
