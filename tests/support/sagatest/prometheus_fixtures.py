"""A real Prometheus (tools/bin/prometheus, from Debian's package) scraping given targets, and
its HTTP API: instant queries, and waiting until every target was scraped after a moment.

Prometheus scrapes every `SCRAPE_INTERVAL`; a test never sleeps on it: it calls `scraped()`,
which waits (with a deadline) until each target's `lastScrape` is later than the call, so the
samples stored from then on reflect everything done before it.
"""

from __future__ import annotations

import datetime
import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentsaga import subprocesses

ROOT = Path(__file__).resolve().parents[3]  # tests/support/sagatest/ -> the repository
PROMETHEUS = ROOT / "tools" / "bin" / "prometheus"
PROMTOOL = ROOT / "tools" / "bin" / "promtool"
SCRAPE_INTERVAL = "1s"
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _parse_time(value: str) -> float:
    """RFC 3339 with nanoseconds (Go's format) -> unix seconds."""
    head, _, frac = value.rstrip("Z").partition(".")
    base = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC).timestamp()
    return base + (float("0." + frac) if frac else 0.0)


@dataclass
class Prometheus:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with _HTTP.open(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise AssertionError(f"prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        """An instant query evaluated at unix time `at`: [{"metric": {...}, "value": v}]."""
        data = self.api("query", query=expr, time=f"{at:.3f}")
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": float(data["result"][1])}]
        return [{"metric": r["metric"], "value": float(r["value"][1])} for r in data["result"]]

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", state="active")["activeTargets"])

    def scraped(self, timeout: float = 30.0) -> float:
        """Wait until every target was scraped (healthy) after this call; returns a time at
        which a query sees those samples."""
        since = time.time()
        deadline = time.monotonic() + timeout
        while True:
            targets = self.targets()
            late = [t["scrapeUrl"] + f" ({t['health']}: {t.get('lastError') or 'not yet'})"
                    for t in targets
                    if t["health"] != "up" or _parse_time(t["lastScrape"]) <= since]
            if targets and not late:
                return time.time()
            if time.monotonic() > deadline:
                raise AssertionError(f"not scraped within {timeout}s: {late}\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        subprocesses.stop(self.proc)


def start_prometheus(workdir: Path, jobs: Mapping[str, list[str]]) -> Prometheus:
    """Prometheus on a free loopback port, scraping each job's host:port targets."""
    if not PROMETHEUS.exists():
        raise FileNotFoundError(f"{PROMETHEUS} is missing: run `make test-tools`")
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                           for job, targets in jobs.items()],
    }
    (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as sink:
        proc = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=sink, stderr=subprocess.STDOUT)
    prometheus = Prometheus(proc, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError("prometheus exited:\n" + prometheus.output())
        try:
            with _HTTP.open(f"{prometheus.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return prometheus
        except OSError:
            pass
        if time.monotonic() > deadline:
            prometheus.stop()
            raise TimeoutError("prometheus did not become ready:\n" + prometheus.output())
        time.sleep(0.1)


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[Prometheus] = []

    def factory(jobs: Mapping[str, list[str]]) -> Prometheus:
        found = start_prometheus(tmp_path / f"prometheus-{len(started)}", jobs)
        started.append(found)
        return found

    yield factory
    for prometheus in started:
        prometheus.stop()
