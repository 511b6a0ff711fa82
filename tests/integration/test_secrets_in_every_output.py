"""Secrets never leave masked: tools that say every planted card number (with and without
spaces, and every other form) and secret (`sk_live_…`, `Bearer …`, ...) in their exceptions,
their arguments and their results, called through a real sidecar process over gRPC and over
MCP, with spans exported over OTLP (payloads on). Every output the run produced is scanned: the
sidecar's own stdout and stderr (its log lines, tracebacks included), every table of the saga
log, every exported span, and what each client was told (answers, errors, reports). None
holds a planted value in clear."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import mcp_types as types
import pytest

from agentsaga.client import SagaClient
from agentsaga.store import roles
from agentsaga.store.connections import with_user
from sagatest.mcp_fixtures import ROOT, MCPSidecar
from sagatest.otlp_collector import Collector, otel_env
from sagatest.planted_secrets import every_row, leaks, planted_text, span_text

TOOLS = "sagatest.hostile_tools"


class Sidecar:
    """`agentsaga sidecar` serving gRPC and MCP, every line it prints kept."""

    def __init__(self, dsn: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentsaga.cli", "sidecar", "--tools", TOOLS,
             "--listen", "127.0.0.1:0", "--mcp-listen", "127.0.0.1:0", "--dsn", dsn],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            env={**os.environ, "AGENTSAGA_RECHECK_PAUSE_S": "0.05", **env})
        assert self.proc.stdout is not None
        self.lines: list[str] = []
        address = url = ""
        for line in self.proc.stdout:
            self.lines.append(line)
            if "listening on " in line:
                address = line.split("listening on ")[1].split()[0]
            if "serving MCP at " in line:
                url = line.split("serving MCP at ")[1].split()[0]
                break
        assert address and url, "".join(self.lines)
        self.reader = threading.Thread(target=self.lines.extend, args=(self.proc.stdout,),
                                       daemon=True)
        self.reader.start()
        self.grpc = SagaClient(address, timeout=30)
        self.mcp = MCPSidecar(self.proc, address, url, Path())

    def output(self) -> str:
        """Everything it printed, once it has stopped (SIGTERM: its shutdown lines too)."""
        self.grpc.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.reader.join(timeout=10)
        return "".join(self.lines)


@pytest.fixture
def sidecar(pg: str, collector: tuple[Collector, int]) -> Iterator[Sidecar]:
    _, port = collector
    started = Sidecar(with_user(pg, roles.SIDECAR), {
        **otel_env(port), "OTEL_SERVICE_NAME": "agentsaga-sidecar",
        "AGENTSAGA_TRACE_PAYLOADS": "true"})
    yield started
    if started.proc.poll() is None:
        started.output()


def _over_grpc(client: SagaClient) -> list[str]:
    """One run through every way a tool can say a secret; what the agent was told."""
    body = {"body": planted_text()}
    told: list[str] = []
    client.begin_run("hostile-grpc", agent="hostile")
    noted = client.dispatch_raw("hostile-grpc", "note", body)
    assert noted.status == "CONFIRMED", noted
    peeked = client.dispatch_raw("hostile-grpc", "peek", body)
    declined = client.dispatch_raw("hostile-grpc", "decline", body)
    assert (peeked.status, declined.status) == ("", "FAILED"), (peeked, declined)
    told += [str(reply) for reply in (noted, peeked, declined)]
    for tool, args, code in (
            ("wire", body, grpc.StatusCode.FAILED_PRECONDITION),  # R6: refused
            ("buggy", body, grpc.StatusCode.INTERNAL),  # a bug in its compensate function
            ("note", {**body, "extra": planted_text()}, grpc.StatusCode.INVALID_ARGUMENT)):
        with pytest.raises(grpc.RpcError) as refused:
            client.dispatch_raw("hostile-grpc", tool, args)
        assert refused.value.code() == code, refused.value.details()
        told += [refused.value.details(), str(refused.value)]
    charged = client.dispatch_raw("hostile-grpc", "charge", body)  # a surprise: unknown
    assert charged.status == "UNKNOWN", charged
    told += [str(charged), str(client.get_run("hostile-grpc"))]

    client.begin_run("hostile-unwind", agent="hostile")
    told.append(str(client.dispatch_raw("hostile-unwind", "note", body)))
    unwound = client.unwind("hostile-unwind")  # its compensation raises, quoting them all
    assert unwound.report["pending"], unwound.report
    told.append(json.dumps(unwound.report))
    return told


async def _over_mcp(sidecar: Sidecar) -> list[str]:
    body = {"body": planted_text()}
    async with sidecar.mcp.client("hostile-mcp") as client:
        results = [await client.call_tool(tool, args) for tool, args in (
            ("note", body), ("peek", body), ("decline", body), ("wire", body),
            ("buggy", body), ("note", {**body, "extra": planted_text()}), ("charge", body))]
    assert [r.is_error for r in results] == [False, True, True, True, True, True, True]
    return [_said(r) for r in results]


def _said(result: types.CallToolResult) -> str:
    text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
    return f"{text}\n{json.dumps(result.structured_content)}\n{json.dumps(result.meta)}"


def test_no_output_of_a_run_holds_a_planted_secret(
        sidecar: Sidecar, pg: str, collector: tuple[Collector, int]) -> None:
    received, _ = collector
    told = _over_grpc(sidecar.grpc) + asyncio.run(_over_mcp(sidecar))
    spans = received.wait_for(lambda got: {"execute_tool note", "execute_tool charge",
                                           "compensate note"} <= {s.name for _, s in got})
    printed = sidecar.output()

    # the tools said it all: the sidecar logged their exceptions, tracebacks included
    assert "RuntimeError" in printed and "Traceback" in printed, printed
    assert "[card ****4242]" in printed and "Bearer [redacted]" in printed, printed
    assert leaks(printed) == [], f"in the sidecar's output:\n{printed}"
    for said in told:
        assert leaks(said) == [], f"told to a client: {said}"
    exported = "\n".join(span_text(span) for _, span in spans)
    assert "[card ****4242]" in exported
    assert not [span_text(s) for _, s in spans if leaks(span_text(s))], "in an exported span"
    rows = every_row(pg)
    assert "[card ****4242]" in rows["public.saga_log"]
    for table, text in rows.items():
        assert leaks(text) == [], f"in table {table}"
