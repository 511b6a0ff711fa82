"""The sidecar serving MCP (`--mcp-listen`) over the world's MCP server as its upstream
(`--mcp-upstreams`), as real processes and servers, and an official MCP client for it."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentsaga import subprocesses
from agentsaga.client import SagaClient
from agentsaga_lab.demo.world_mcp import WorldMCP, write_upstreams
from agentsaga_lab.world import World

ROOT = Path(__file__).resolve().parents[3]  # tests/support/sagatest/ -> the repository
LISTENING = re.compile(r"listening on (\S+)")
SERVING_MCP = re.compile(r"serving MCP at (\S+)")
T = TypeVar("T")


@dataclass
class MCPSidecar:
    proc: subprocess.Popen[str]
    address: str
    url: str
    upstreams: Path

    def grpc(self) -> SagaClient:
        return SagaClient(self.address, timeout=30)

    def client(self, run_id: str | None) -> Client:
        """The official MCP client, sending `Agentsaga-Run-Id: run_id` when given."""
        headers = {"Agentsaga-Run-Id": run_id} if run_id else {}
        return Client(streamable_http_client(self.url,
                                             http_client=httpx2.AsyncClient(headers=headers)))


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


def start_mcp_sidecar(dsn: str, upstreams: Path, *, env: dict[str, str] | None = None,
                      tools: str | None = None, mcp_listen: str = "127.0.0.1:0") -> MCPSidecar:
    args = [sys.executable, "-m", "agentsaga.cli", "sidecar", "--listen", "127.0.0.1:0",
            "--dsn", dsn, "--mcp-listen", mcp_listen, "--mcp-upstreams", str(upstreams)]
    if tools:
        args += ["--tools", tools]
    full_env = {**os.environ, "AGENTSAGA_RECHECK_PAUSE_S": "0.05", **(env or {})}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=full_env, cwd=ROOT)
    assert proc.stdout is not None
    seen: list[str] = []
    address = ""
    for line in proc.stdout:
        seen.append(line)
        if match := LISTENING.search(line):
            address = match.group(1)
        if match := SERVING_MCP.search(line):
            # keep draining its output, or a full pipe would block the sidecar
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return MCPSidecar(proc, address, match.group(1), upstreams)
    proc.wait()
    raise RuntimeError("the sidecar exited before serving MCP:\n" + "".join(seen))


@pytest.fixture
def world_mcp(world: World) -> Iterator[WorldMCP]:
    with WorldMCP(world.url) as server:
        yield server


@pytest.fixture
def upstreams_file(world_mcp: WorldMCP, tmp_path: Path) -> Path:
    return write_upstreams(world_mcp.url, tmp_path / "upstreams.yaml")


@pytest.fixture
def mcp_sidecar_factory() -> Iterator[Callable[..., MCPSidecar]]:
    started: list[MCPSidecar] = []

    def factory(dsn: str, upstreams: Path, **kwargs: Any) -> MCPSidecar:
        sidecar = start_mcp_sidecar(dsn, upstreams, **kwargs)
        started.append(sidecar)
        return sidecar

    yield factory
    for sidecar in started:
        subprocesses.stop(sidecar.proc)
        if sidecar.proc.stdout:
            sidecar.proc.stdout.close()


@pytest.fixture
def mcp_sidecar(pg: str, upstreams_file: Path,
                mcp_sidecar_factory: Callable[..., MCPSidecar]) -> MCPSidecar:
    return mcp_sidecar_factory(pg, upstreams_file)
