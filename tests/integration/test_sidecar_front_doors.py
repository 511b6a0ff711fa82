"""The sidecar's front doors: MCP checks Host and Origin on every listen address (DNS
rebinding is refused with 421 on 127.0.0.2 and 0.0.0.0 too); a non-loopback listener (gRPC or
MCP) requires the pod's token (UNAUTHENTICATED / 401 without it or with another) and refuses
to start without one; run creation is bounded per sidecar (RESOURCE_EXHAUSTED naming
AGENTSAGA_MAX_OPEN_RUNS); and what the sidecar keeps per run is released when a run ends or
never existed. Real sidecar processes over sockets, a real Postgres."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsaga.client import RateLimited, Refused, SagaClient
from agentsaga.service.saga_service import SagaService
from agentsaga.sidecar.server import SidecarServicer, serve
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga.v1 import sidecar_pb2_grpc as pb_grpc
from sagatest.cli_tools import agentsaga
from sagatest.mcp_fixtures import MCPSidecar
from sagatest.sidecar_fixtures import ROOT, SidecarProcess

TOOLS = "sagatest.ledger_tools"
TOKEN = "pod-token-7f3a9c"
Factory = Callable[..., SidecarProcess]
MCPFactory = Callable[..., MCPSidecar]
UNREACHABLE = "postgresql://agentsaga@127.0.0.1:9/nothing"
LIST_TOOLS = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})


def token_file(tmp_path: Path, token: str = TOKEN) -> str:
    path = tmp_path / "token"
    path.write_text(token + "\n")
    return str(path)


def mcp_post(url: str, *, host: str | None = None, origin: str | None = None,
             token: str | None = None) -> tuple[int, str]:
    """POST tools/list to the MCP endpoint at `url`, naming `host` in the Host header."""
    address = url.removeprefix("http://").split("/", 1)[0]
    name, _, port = address.rpartition(":")
    connect = "127.0.0.1" if name in ("0.0.0.0", "[::]") else name.strip("[]")
    headers = {"Host": host or address, "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream", "Agentsaga-Run-Id": "doors"}
    if origin:
        headers["Origin"] = origin
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn = http.client.HTTPConnection(connect, int(port), timeout=30)
    try:
        conn.request("POST", "/mcp", LIST_TOOLS, headers)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "127.0.0.2:0", "0.0.0.0:0"])
def test_mcp_refuses_a_rebound_host_or_origin_on_every_listen_address(
        listen: str, pg: str, upstreams_file: Path, mcp_sidecar_factory: MCPFactory,
        tmp_path: Path) -> None:
    env = {"AGENTSAGA_ALLOW_REMOTE": "true", "AGENTSAGA_ACCESS_TOKEN_FILE": token_file(tmp_path),
           "AGENTSAGA_MCP_ALLOWED_HOSTS": "agent.ns.svc"}
    sidecar = mcp_sidecar_factory(pg, upstreams_file, mcp_listen=listen, env=env)
    token = None if listen.startswith("127.") else TOKEN
    status, body = mcp_post(sidecar.url, host="evil.example:80", token=token)
    assert status == 421, body
    status, body = mcp_post(sidecar.url, origin="http://evil.example", token=token)
    assert status == 403, body
    port = sidecar.url.rsplit(":", 1)[1].split("/")[0]
    for host in (None, f"agent.ns.svc:{port}"):
        status, body = mcp_post(sidecar.url, host=host, origin="http://agent.ns.svc",
                                token=token)
        assert status == 200, body
        assert "create_ticket" in body


def test_mcp_on_a_non_loopback_address_requires_the_pods_token(
        pg: str, upstreams_file: Path, mcp_sidecar_factory: MCPFactory, tmp_path: Path) -> None:
    sidecar = mcp_sidecar_factory(pg, upstreams_file, mcp_listen="0.0.0.0:0", env={
        "AGENTSAGA_ALLOW_REMOTE": "true", "AGENTSAGA_ACCESS_TOKEN_FILE": token_file(tmp_path)})
    status, body = mcp_post(sidecar.url)
    assert status == 401 and "needs the pod's access token" in body, body
    status, body = mcp_post(sidecar.url, token="guessed")
    assert status == 401 and "not this sidecar's" in body, body
    status, body = mcp_post(sidecar.url, token=TOKEN)
    assert status == 200 and "create_ticket" in body, body


@pytest.mark.parametrize("flag", ["--listen", "--mcp-listen"])
def test_a_non_loopback_listener_without_a_token_refuses_to_start(flag: str) -> None:
    args = ["sidecar", "--tools", TOOLS, "--dsn", UNREACHABLE, flag, "0.0.0.0:0"]
    done = agentsaga(*args, cwd=ROOT, env={"AGENTSAGA_ALLOW_REMOTE": "true"})
    assert done.returncode == 2, done.stdout
    assert "refusing to listen on '0.0.0.0:0' without an access token" in done.stderr
    assert "AGENTSAGA_ACCESS_TOKEN_FILE" in done.stderr
    assert "listening on" not in done.stdout


def test_grpc_on_a_non_loopback_address_requires_the_pods_token(
        sidecar_factory: Factory, ledger: str, tmp_path: Path) -> None:
    sidecar = sidecar_factory(ledger, TOOLS, listen="0.0.0.0:0", env={
        "AGENTSAGA_ALLOW_REMOTE": "true", "AGENTSAGA_ACCESS_TOKEN_FILE": token_file(tmp_path)})
    address = f"127.0.0.1:{sidecar.address.rsplit(':', 1)[1]}"
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.SidecarStub(channel)
    for metadata in ((), (("authorization", "Bearer guessed"),),
                     (("authorization", TOKEN),)):
        with pytest.raises(grpc.RpcError) as refused:
            stub.BeginRun(pb.BeginRunRequest(run_id="intruder"), metadata=metadata, timeout=30)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert "access token" in (refused.value.details() or "")
    # the kubelet's probe carries no token: health stays open, and tells nothing of runs
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30).status == \
        health_pb2.HealthCheckResponse.SERVING
    channel.close()
    with SagaClient(address, timeout=30, token=TOKEN) as client:
        client.begin_run("invited")
        assert client.get_run("invited").state == "running"
    # nothing of the refused requests reached the log
    with SagaClient(address, timeout=30, token=TOKEN) as client, \
            pytest.raises(Refused) as missing:
        client.get_run("intruder")
    assert "has not begun" in str(missing.value)


def test_the_client_sends_the_token_of_access_token_file(
        sidecar_factory: Factory, ledger: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = token_file(tmp_path)
    sidecar = sidecar_factory(ledger, TOOLS, listen="0.0.0.0:0", env={
        "AGENTSAGA_ALLOW_REMOTE": "true", "AGENTSAGA_ACCESS_TOKEN_FILE": path})
    monkeypatch.setenv("AGENTSAGA_ACCESS_TOKEN_FILE", path)
    with SagaClient(f"127.0.0.1:{sidecar.address.rsplit(':', 1)[1]}", timeout=30) as client:
        client.begin_run("from-the-file")
        assert client.get_run("from-the-file").state == "running"


def test_run_creation_is_bounded_per_sidecar(sidecar_factory: Factory, ledger: str) -> None:
    sidecar = sidecar_factory(ledger, TOOLS, env={"AGENTSAGA_MAX_OPEN_RUNS": "3"})
    client = sidecar.client()
    for n in range(3):
        client.begin_run(f"open-{n}")
    with pytest.raises(RateLimited) as refused:
        client.begin_run("one-too-many")
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "holds 3 open runs already" in str(refused.value)
    assert "AGENTSAGA_MAX_OPEN_RUNS" in str(refused.value)
    with pytest.raises(Refused):
        client.get_run("one-too-many")  # nothing was written
    client.begin_run("open-0")  # adopting a run it holds is not a new one
    client.end_run("open-0", "Failed")
    client.begin_run("one-too-many")  # a run ended: room for one more
    assert client.get_run("one-too-many").state == "running"
    with pytest.raises(RateLimited):
        client.begin_run("after-unwind")
    client.unwind("open-1")  # ended by its unwind, not EndRun: let go when room is needed
    client.begin_run("after-unwind")
    assert client.get_run("after-unwind").state == "running"


def test_per_run_state_is_released_when_runs_end_or_never_existed(
        ledger_service: SagaService) -> None:
    """500 runs begun and ended, and 500 calls naming runs that never existed, over a real
    gRPC socket: afterwards the sidecar keeps nothing per run (no epoch, no lock)."""
    serving = serve(SidecarServicer(ledger_service), "127.0.0.1:0", workers=4)
    try:
        with SagaClient(serving.address, timeout=30) as client:
            for n in range(500):
                client.begin_run(f"cycle-{n}")
                client.dispatch(f"cycle-{n}", "search_orders", {"order_id": str(n)})
                client.end_run(f"cycle-{n}", "Failed")
            for n in range(500):
                with pytest.raises(Refused):
                    (client.get_run if n % 2 else client.reconcile)(f"ghost-{n}")
                with pytest.raises(Refused):
                    client.dispatch(f"ghost-{n}", "charge_card",
                                    {"customer_id": "c", "amount": 5})
            with pytest.raises(Refused) as ended:
                client.dispatch("cycle-7", "charge_card", {"customer_id": "c", "amount": 5})
            assert "has ended" in str(ended.value)
            # an ended run's rows are still settled here: its pod is still its owner
            assert client.unwind("cycle-7").settled
            assert client.get_run("cycle-7").state == "unwound"
    finally:
        serving.stop()
    assert ledger_service.run_state() == {"open_runs": 0, "run_locks": 0}

