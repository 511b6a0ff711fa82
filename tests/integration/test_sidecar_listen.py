"""The sidecar's address and log as a first user meets them: a taken port is an error naming
it (no silent sharing through SO_REUSEPORT), `--listen foo` is not host:port, an address other
than loopback is served only when allowed, and log lines say which run, step and tool they are
about."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from agentsaga import subprocesses
from agentsaga.client import SagaClient, ToolOutcomeUnknown
from sagatest import ledger_tools
from sagatest.cli_tools import agentsaga
from sagatest.sidecar_fixtures import SidecarProcess

TOOLS = "sagatest.ledger_tools"
Factory = Callable[..., SidecarProcess]
ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = "postgresql://agentsaga@127.0.0.1:9/nothing"


def test_a_second_sidecar_on_a_taken_port_fails_naming_the_port(sidecar_factory: Factory,
                                                                ledger: str) -> None:
    first = sidecar_factory(ledger, TOOLS)
    port = first.address.rsplit(":", 1)[1]
    second = agentsaga("sidecar", "--tools", TOOLS, "--dsn", ledger, "--listen",
                       f"127.0.0.1:{port}", cwd=ROOT)
    assert second.returncode == 2, second.stdout
    assert f"port {port} in use (another sidecar?)" in second.stderr
    assert "listening on" not in second.stdout
    # the port is taken before the database is waited for: no wait, whatever the database
    unreachable = agentsaga("sidecar", "--tools", TOOLS, "--dsn", UNREACHABLE, "--listen",
                            f"127.0.0.1:{port}", cwd=ROOT, env={"AGENTSAGA_DB_WAIT_S": "20"})
    assert unreachable.returncode == 2, unreachable.stdout
    assert f"port {port} in use (another sidecar?)" in unreachable.stderr
    assert "saga log's Postgres" not in unreachable.stderr, "it waited for the database first"
    client = first.client()  # the first one still serves, alone
    client.begin_run("still-mine")
    assert client.get_run("still-mine").state == "running"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("taken", ["127.0.0.1", "::1"])
def test_localhost_with_one_family_of_its_port_taken_fails_naming_it(taken: str,
                                                                    tmp_path: Path) -> None:
    """`localhost` is two addresses to gRPC (127.0.0.1 and ::1): with one of them held by
    another process, the sidecar must not serve on the other alone (out of reach of half its
    clients), but fail at once, naming the port and the address."""
    if ":" in taken and not _ipv6_loopback():
        pytest.skip("this host has no IPv6 loopback")
    family = socket.AF_INET6 if ":" in taken else socket.AF_INET
    with socket.socket(family) as holder:
        holder.bind((taken, 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = agentsaga("sidecar", "--tools", TOOLS, "--dsn", UNREACHABLE, "--listen",
                         f"localhost:{port}", cwd=ROOT, env={"AGENTSAGA_DB_WAIT_S": "5"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"port {port} in use (another sidecar?) on {taken}" in done.stderr, done.stderr
    assert "listening on" not in done.stdout
    assert "saga log's Postgres" not in done.stderr, "it bound half of localhost and went on"


def test_localhost_is_served_on_both_loopbacks(sidecar_factory: Factory, ledger: str) -> None:
    sidecar = sidecar_factory(ledger, TOOLS, listen="localhost:0")
    port = sidecar.address.rsplit(":", 1)[1]
    assert sidecar.address == f"localhost:{port}"
    families = {"ipv4": "127.0.0.1", "ipv6": "[::1]"}
    if not _ipv6_loopback():
        del families["ipv6"]
    for family, host in families.items():
        with SagaClient(f"{host}:{port}", timeout=10) as client:
            client.begin_run(f"via-{family}")
            assert client.get_run(f"via-{family}").state == "running"


@pytest.mark.parametrize("listen", ["foo", "127.0.0.1", "localhost:http", ":50051"])
def test_listen_that_is_not_host_port_says_so(listen: str, tmp_path: Path) -> None:
    done = agentsaga("sidecar", "--tools", TOOLS, "--listen", listen, "--dsn",
                     "postgresql://x@127.0.0.1:9/x", cwd=tmp_path)
    assert done.returncode == 2
    assert f"--listen {listen!r} is not host:port" in done.stderr


def test_a_non_loopback_listen_is_served_only_when_allowed_by_the_environment(
        sidecar_factory: Factory, ledger: str, tmp_path: Path) -> None:
    """The pod's IP (0.0.0.0: every address, as the kubelet's gRPC probe needs) is refused
    unless AGENTSAGA_ALLOW_REMOTE (the chart's way of saying `--allow-remote`) is true, and then
    served to holders of the pod's token (test_sidecar_front_doors.py)."""
    for env in ({}, {"AGENTSAGA_ALLOW_REMOTE": "false"}):
        refused = agentsaga("sidecar", "--tools", TOOLS, "--dsn", UNREACHABLE, "--listen",
                            "0.0.0.0:0", cwd=ROOT, env=env)
        assert refused.returncode == 2, refused.stdout
        assert "refusing to listen on '0.0.0.0:0': not a loopback address" in refused.stderr
        assert "AGENTSAGA_ALLOW_REMOTE=true" in refused.stderr
    (tmp_path / "token").write_text("t0ken")
    sidecar = sidecar_factory(ledger, TOOLS, listen="0.0.0.0:0",
                              env={"AGENTSAGA_ALLOW_REMOTE": "true",
                                   "AGENTSAGA_ACCESS_TOKEN_FILE": str(tmp_path / "token")})
    host, port = sidecar.address.rsplit(":", 1)
    assert host == "0.0.0.0"
    client = SagaClient(f"127.0.0.1:{port}", timeout=30, token="t0ken")
    sidecar.clients.append(client)
    client.begin_run("served-on-every-address")
    assert client.get_run("served-on-every-address").state == "running"


def test_sidecar_log_lines_name_run_step_and_tool(sidecar_factory: Factory,
                                                  ledger: str) -> None:
    sidecar = sidecar_factory(ledger, TOOLS)
    client = sidecar.client()
    client.begin_run("logged-run")
    client.dispatch("logged-run", "search_orders", {"order_id": "1"})
    ledger_tools.add_fault(ledger, "charge_card", "unknown_after_commit")
    with pytest.raises(ToolOutcomeUnknown):
        client.dispatch("logged-run", "charge_card", {"customer_id": "c", "amount": 5})
    subprocesses.stop(sidecar.proc)
    assert sidecar.proc.stdout is not None
    lines = [line for line in sidecar.proc.stdout.read().splitlines() if "UNKNOWN" in line]
    assert lines, "no log line for the unknown outcome"
    assert "run=logged-run step=0 tool=charge_card key=" in lines[0], lines[0]
