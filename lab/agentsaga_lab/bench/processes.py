"""The benchmark's Postgres and sidecar processes (real ones, on loopback)."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsaga import subprocesses
from agentsaga.store import roles
from agentsaga.store.postgres import embedded_dsn, stop_embedded
from agentsaga.store.provisioning import (
    as_credential,
    create_database,
    without_connection_limit,
    without_row_checks,
)

TOOLS = "agentsaga_lab.bench.tools"

NAMESPACE = "bench"
"""The agent namespace whose credential the dispatch is measured with: row-level security and
the guarding triggers apply to it as they do to every sidecar in a cluster."""


def tenant_env() -> dict[str, str]:
    """A sidecar's environment for the namespace credential (it serves that namespace)."""
    return {"AGENTSAGA_POD_NAMESPACE": NAMESPACE}


@dataclass
class BenchDatabase:
    dsn: str
    """A fresh, migrated database for this run, as its owner."""
    admin_dsn: str
    embedded_dir: Path | None = None
    """The throw-away embedded server's folder (None: a server given with --dsn)."""
    tenant_dsn: str = ""
    """The same database as the sidecar credential of NAMESPACE (row checks on)."""
    password: str = ""
    """That credential's password (set by the bench's migration)."""

    def twin_without_row_checks(self, name: str) -> str:
        """Another database `name` on the same server, migrated as this one with the same
        credential, then with row-level security and the triggers off (`without_row_checks`);
        returns its DSN as that credential: the same statements, without what isolates."""
        dsn = create_database(self.admin_dsn, name, {NAMESPACE: {"sidecar": self.password}})
        without_row_checks(dsn)
        _unlimited(dsn)
        return as_credential(dsn, roles.namespace_role(NAMESPACE, "sidecar"), self.password)

    def stop(self) -> None:
        """Stop the embedded server and remove its folder (a --dsn server is left alone)."""
        if self.embedded_dir is not None:
            stop_embedded(self.embedded_dir)
            shutil.rmtree(self.embedded_dir.parent, ignore_errors=True)


def bench_database(admin_dsn: str | None) -> BenchDatabase:
    """A fresh, migrated database on `admin_dsn`'s server (embedded Postgres when None), with
    the sidecar credential of NAMESPACE."""
    embedded = None
    if admin_dsn is None:
        embedded = Path(tempfile.mkdtemp(prefix="agentsaga-bench-")) / "pg"
        admin_dsn = embedded_dsn(embedded)
    name = f"agentsaga_bench_{os.getpid()}_{int(time.time())}"
    password = secrets.token_hex(16)
    dsn = create_database(admin_dsn, name, {NAMESPACE: {"sidecar": password}})
    _unlimited(dsn)
    tenant = as_credential(dsn, roles.namespace_role(NAMESPACE, "sidecar"), password)
    return BenchDatabase(dsn, admin_dsn, embedded, tenant, password)


def _unlimited(dsn: str) -> None:
    """No connection limit for the bench's credential (every migrate sets the tenant limit
    again): two sidecars at 32 runs each and the in-process service share it at once."""
    without_connection_limit(dsn, roles.namespace_role(NAMESPACE, "sidecar"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def rss_mb(pid: int) -> float:
    """Resident memory of a process (Linux /proc), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class Sidecar:
    proc: subprocess.Popen[bytes]
    address: str
    startup_s: float
    """From process start to SERVING on the health service."""
    log_path: Path
    """The sidecar's stderr (removed when it stops: the bench leaves nothing behind)."""

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        subprocesses.stop(self.proc)
        self.log_path.unlink(missing_ok=True)


def start_sidecar(dsn: str, *, env: dict[str, str] | None = None,
                  timeout: float = 30.0, extra_args: Sequence[str] = ()) -> Sidecar:
    """`agentsaga sidecar` as its own process; returns once health says SERVING."""
    address = f"127.0.0.1:{free_port()}"
    full_env = {**os.environ, "AGENTSAGA_RECHECK_PAUSE_S": "0",  # the bench is not throttled
                "AGENTSAGA_MAX_CALLS_PER_S": "0", "AGENTSAGA_MAX_RPCS_PER_S": "0",
                "AGENTSAGA_MAX_TOTAL_RPCS_PER_S": "0",
                # the throughput loads begin more runs at once than an agent pod would
                "AGENTSAGA_MAX_OPEN_RUNS": "100000", **(env or {})}
    start = time.perf_counter()
    fd, log_path = tempfile.mkstemp(prefix="agentsaga-bench-sidecar-", suffix=".log")
    with os.fdopen(fd, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentsaga.cli", "sidecar", "--tools", TOOLS, "--listen",
             address, "--dsn", dsn, *extra_args],
            stdout=subprocess.DEVNULL, stderr=log_file, env=full_env,
        )
    # one health call at a time, each waiting for the channel to connect (a tight loop of
    # calls that fail at once kept connecting to the port bound before the server started, and
    # measured 5 s for a 0.4 s start-up), and a reconnect at once after a refused connection
    # (gRPC's default back-off, 1 s, would be measured instead of the start-up)
    channel = grpc.insecure_channel(address, options=[
        ("grpc.initial_reconnect_backoff_ms", 10), ("grpc.min_reconnect_backoff_ms", 10),
        ("grpc.max_reconnect_backoff_ms", 20)])
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sidecar exited with {proc.returncode}:\n"
                                   + _read_and_remove(log_path))
            try:
                left = timeout - (time.perf_counter() - start)
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""),
                                   timeout=max(0.01, min(1.0, left)), wait_for_ready=True)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError:
                pass
            if time.perf_counter() - start > timeout:
                subprocesses.stop(proc)
                raise RuntimeError(f"sidecar not SERVING within {timeout}s:\n"
                                   + _read_and_remove(log_path))
            time.sleep(0.002)
    finally:
        channel.close()
    elapsed = time.perf_counter() - start
    return Sidecar(proc, address, elapsed, Path(log_path))


def _read_and_remove(path: str) -> str:
    text = Path(path).read_text(errors="replace")
    Path(path).unlink(missing_ok=True)
    return text
