"""The operator at scale: N AgentRuns (90% finished) in a Kubernetes API server,
the operator started against it through a counting proxy (`kube_proxy`), then measured at
idle: API requests/s (at the proxy), SQL queries/s (the bench database's transactions: the
operator's statements are autocommit), its RSS; and the time from a pod eviction to the Job's
creation under that load.

Idle is measured only once the operator's start-up is over (a condition with a deadline, not a
sleep: `_started_up`), over a window several resync intervals long, so that the operator's
steady work (the log watch, the bounded resync's walk, the binding loop's rounds) is counted
at its real rate. The window's requests are reported by verb and path too.

The API server is given with `--kube-url` and must serve the AgentRun CRD (crds/) without
credentials: `kubectl proxy` in front of a throw-away cluster (in a checkout, `make
bench-operator-scale N=...` starts the tests' control plane and the proxy). The objects the
bench creates are left there: use a server you throw away afterwards.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsaga import subprocesses
from agentsaga.keys import log_run_id
from agentsaga.store import SagaLog
from agentsaga.store.provisioning import database_name, transactions
from agentsaga_lab.bench.kube_proxy import CountingProxy
from agentsaga_lab.bench.processes import rss_mb

AR = "/apis/agentsaga.io/v1alpha1/namespaces/{ns}/agentruns"
RUN_LABEL = "agentsaga.io/run"


@dataclass(frozen=True)
class OperatorScale:
    runs: int
    finished: int
    idle_s: float
    settle_s: float
    """From the operator's start until its start-up was over (`_started_up`): kopf's finalizer
    on every object, a first pass of every unfinished run, every open run of the log bound."""
    api_requests: int
    sql_queries: int
    rss_mb: float
    eviction_to_job_s: float
    background_qps: float
    """The database's transactions/s with no operator running (autovacuum, statistics), measured
    just before over as long a window, and taken off the operator's figure."""
    requests: dict[str, int]
    """The idle window's API requests by verb and path, object names left out."""
    timeline: list[int]
    """The idle window's API requests per 10 s: steady, or the tail of the start-up."""

    @property
    def api_rps(self) -> float:
        return self.api_requests / self.idle_s

    @property
    def sql_qps(self) -> float:
        return max(0.0, self.sql_queries / self.idle_s - self.background_qps)


class KubeHttp:
    """JSON over HTTP to an API server that needs no credentials: one kept-alive connection per
    thread (the bench creates its thousands of AgentRuns from a pool of threads)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        self._https, self._netloc, self._base = parts.scheme == "https", parts.netloc, parts.path
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = self._local.conn = kind(self._netloc, timeout=60)
        return conn

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        for attempt in (1, 2, 3):
            conn = self._connection()
            reused = conn.sock is not None
            try:
                conn.request(method, self._base + path, body=data, headers=headers)
                reply = conn.getresponse()
                raw = reply.read()
                break
            except (http.client.HTTPException, ConnectionError) as exc:
                conn.close()
                self._local.conn = None
                # again: a read (a list cut short by a loaded server), or a request a kept-alive
                # connection lost before the server read it
                again = method == "GET" or (reused and isinstance(
                    exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)))
                if not again or attempt == 3:
                    raise
        if reply.status >= 400:
            detail = raw.decode(errors="replace")[:500]
            raise RuntimeError(f"{method} {path}: {reply.status} {detail}")
        return json.loads(raw) if raw else None

    def list_all(self, path: str, chunk: int = 500) -> list[Any]:
        """Every item of a collection, `chunk` at a time (each response small enough that a
        loaded API server sends it whole)."""
        items: list[Any] = []
        token = ""
        while True:
            query = f"?limit={chunk}" + (f"&continue={urllib.parse.quote(token)}" if token else "")
            page = self.call("GET", path + query)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def require_crd(self) -> None:
        try:
            self.call("GET", "/apis/agentsaga.io/v1alpha1")
        except (RuntimeError, OSError) as exc:
            raise RuntimeError(
                f"{self.url} does not serve agentsaga.io/v1alpha1 ({exc}): give the bench "
                "`kubectl proxy`'s plain-HTTP URL in front of an API server that has crds/ "
                "applied (in a checkout: `make bench-operator-scale N=...`)") from exc

    def agentrun(self, ns: str, name: str, status: dict[str, Any],
                 spec: dict[str, Any] | None = None) -> None:
        self.call("POST", AR.format(ns=ns), {
            "apiVersion": "agentsaga.io/v1alpha1", "kind": "AgentRun",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"agent": "bench", **(spec or {})}})
        self.call("PATCH", AR.format(ns=ns) + f"/{name}/status", {"status": status},
                  "application/merge-patch+json")


def _kubeconfig(path: Path, url: str) -> None:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench",
                                                    "namespace": "default"}}]}))


def _wait_quiet(proxy: CountingProxy, proc: subprocess.Popen[bytes], quiet_s: float,
                deadline_s: float, settled: Callable[[], bool] = lambda: True) -> None:
    """Until `settled()` and then the operator made no request for `quiet_s` (what its
    start-up set off has been handled)."""
    deadline = time.monotonic() + deadline_s
    while not settled():  # (a listing of every AgentRun: not too often)
        _check_running(proc, deadline, deadline_s)
        time.sleep(3.0)
    while True:
        _check_running(proc, deadline, deadline_s)
        newest = proxy.quiet_since()
        if newest and time.monotonic() - newest >= quiet_s:
            return
        time.sleep(max(0.1, quiet_s / 4))


def _check_running(proc: subprocess.Popen[bytes], deadline: float, deadline_s: float) -> None:
    if proc.poll() is not None:
        raise RuntimeError(f"the operator exited with {proc.returncode}")
    if time.monotonic() > deadline:
        raise RuntimeError(f"the operator did not settle within {deadline_s:.0f} s")


STARTED_UP = "bound the AgentRuns of every open run in the saga log"
"""What the operator logs once its binding loop has walked every open run (`run_walk`)."""


LAST_HANDLED = "agentsaga.io/last-handled-configuration"
"""kopf's last write on its first sight of an AgentRun (after the finalizer), under the
operator's annotation prefix."""


def _started_up(kube: KubeHttp, namespace: str, live: list[str], total: int,
                log: Path) -> Callable[[], bool]:
    """True once the operator's start-up is over: every AgentRun carries its finalizer and its
    last-handled configuration (kopf's two writes on its first sight of each: at 10,000 objects
    the second trails the first by minutes, and a pause in between is no end of the start-up),
    every unfinished one shows `status.observedGeneration` (its daemon made a first pass), and
    the log says every open run of the saga log was bound."""
    unfinished = set(live)

    def check() -> bool:
        if STARTED_UP not in log.read_text(errors="replace"):
            return False
        items = kube.list_all(AR.format(ns=namespace))
        seen = sum(1 for o in items if o["metadata"].get("finalizers")
                   and LAST_HANDLED in (o["metadata"].get("annotations") or {}))
        passed = sum(1 for o in items if o["metadata"]["name"] in unfinished
                     and (o.get("status") or {}).get("observedGeneration") is not None)
        return seen >= total and passed >= len(unfinished)
    return check


def _steps(since: float, until: float, step: float) -> list[float]:
    return [since + i * step for i in range(int((until - since) // step))]


_NAMED = re.compile(r"/(agentruns|pods|jobs|namespaces|leases)/[^/?]+")
_UNNAMED = r"/\1/*"


def request_kinds(stamps: list[tuple[float, str, str]], since: float,
                  until: float) -> dict[str, int]:
    """Requests in [since, until) by verb (WATCH for a watch) and path, names left out."""
    counts: Counter[str] = Counter()
    for t, method, path_qs in stamps:
        if since <= t < until:
            path, _, query = path_qs.partition("?")
            verb = "WATCH" if "watch=true" in query or "watch=1" in query else method
            counts[f"{verb} {_NAMED.sub(_UNNAMED, path)}"] += 1
    return dict(counts.most_common())


def measure(dsn: str, admin_dsn: str, kube_url: str, runs: int, idle_s: float,
            progress: Callable[[str], None], namespace: str = "default") -> OperatorScale:
    kube = KubeHttp(kube_url)
    kube.require_crd()
    prefix = f"bench-{os.getpid()}"
    live = [f"{prefix}-live-{i}" for i in range(max(1, runs // 10))]
    finished = [f"{prefix}-done-{i}" for i in range(runs - len(live))]
    progress(f"operator scale: {len(finished)} finished and {len(live)} running AgentRuns")
    with SagaLog(dsn, min_size=1, max_size=4).open(migrate=False) as saga_log:
        for name in live:
            saga_log.begin_run(log_run_id(namespace, name), agent="bench", namespace=namespace)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: kube.agentrun(namespace, n, {
            "phase": "Succeeded", "message": "the run ended in the saga log (succeeded)"}),
            finished))
        list(pool.map(lambda n: kube.agentrun(namespace, n, {"phase": "Running"}), live))
    db = database_name(dsn)
    progress(f"operator scale: the server's own transactions for {idle_s:.0f} s, no operator")
    before = transactions(admin_dsn, db)
    began = time.monotonic()
    time.sleep(idle_s)
    background = (transactions(admin_dsn, db) - before) / (time.monotonic() - began)
    proxy = CountingProxy(kube_url).start()
    workdir = Path(tempfile.mkdtemp(prefix="agentsaga-bench-operator-"))
    _kubeconfig(workdir / "kubeconfig", proxy.url)
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
    env.update(KUBECONFIG=str(workdir / "kubeconfig"), AGENTSAGA_SIDECAR_IMAGE="agentsaga:bench",
               NO_PROXY="127.0.0.1,localhost")
    log = (workdir / "operator.log").open("wb")
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "agentsaga.cli", "operator", "--standalone",
                             "--namespace", namespace, "--dsn", dsn],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    finished_well = False
    try:
        progress("operator scale: waiting for the operator to settle")
        _wait_quiet(proxy, proc, 3.0, 300.0 + runs * 0.2,
                    _started_up(kube, namespace, live, len(finished) + len(live),
                                workdir / "operator.log"))
        settle_s = time.monotonic() - started
        progress(f"operator scale: idle for {idle_s:.0f} s")
        xacts = transactions(admin_dsn, db)
        since = time.monotonic()
        time.sleep(idle_s)
        until = time.monotonic()
        sql = transactions(admin_dsn, db) - xacts
        api = proxy.count(since, until)
        kinds = request_kinds(list(proxy.stamps), since, until)
        timeline = [proxy.count(t, min(t + 10.0, until)) for t in _steps(since, until, 10.0)]
        rss = rss_mb(proc.pid)
        progress("operator scale: evicting a running run's pod")
        evict_s = _eviction_to_job(kube, saga_log_dsn=dsn, namespace=namespace, prefix=prefix,
                                   proxy=proxy, proc=proc)
        finished_well = True
    finally:
        subprocesses.stop(proc)
        log.close()
        proxy.stop()
        if finished_well:
            shutil.rmtree(workdir, ignore_errors=True)
        else:  # what the operator said is what explains the failure
            progress(f"operator scale: the operator's log is kept in {workdir / 'operator.log'}")
    return OperatorScale(runs, len(finished), until - since, settle_s, api, sql, rss, evict_s,
                         background, kinds, timeline)


def _eviction_to_job(kube: KubeHttp, *, saga_log_dsn: str, namespace: str, prefix: str,
                     proxy: CountingProxy, proc: subprocess.Popen[bytes]) -> float:
    """A running run bound to a pod (grace period 0); the pod evicted; until a Job exists."""
    name, pod = f"{prefix}-evicted", f"{prefix}-agent-pod"
    created = kube.call("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": namespace, "labels": {RUN_LABEL: name}},
        "spec": {"containers": [{"name": "agent", "image": "example/agent:1"}]}})
    kube.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}/status",
              {"status": {"phase": "Running"}}, "application/merge-patch+json")
    kube.agentrun(namespace, name, {"phase": "Running", "pod": {
        "name": pod, "uid": created["metadata"]["uid"], "namespace": namespace}},
        spec={"onOrphan": "reconcile", "orphanGracePeriodSeconds": 0})
    # the run begins in the log after its AgentRun exists: the operator, told of the new run,
    # adopts that AgentRun rather than creating one first
    with SagaLog(saga_log_dsn, min_size=1, max_size=2).open(migrate=False) as saga_log:
        saga_log.begin_run(log_run_id(namespace, name), agent="bench", namespace=namespace)
    _wait_quiet(proxy, proc, 1.0, 120.0)
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    before = {j["metadata"]["name"] for j in kube.call("GET", jobs)["items"]}
    start = time.monotonic()
    kube.call("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace}})
    deadline = start + 120.0
    while time.monotonic() < deadline:
        found = {j["metadata"]["name"] for j in kube.call("GET", jobs)["items"]}
        if found - before:
            return time.monotonic() - start
        time.sleep(0.02)
    raise RuntimeError("no Job within 120 s of the eviction")
