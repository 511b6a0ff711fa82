"""Every panel of the chart's Grafana dashboard, evaluated by a real Prometheus that scraped a real
sidecar and the operator (OpenTelemetry's Prometheus exporter) through a scripted session:

    quick-lookup   a run that only reads, then ends
    refund-1182    the essay's incident: Jira answers 504 after creating the ticket (UNKNOWN),
                   the reworded retry is settled by key, the card is authorised, the warehouse
                   rejects the reship, the agent unwinds through the sidecar
    reship-1183    the reordered run: drafts and an authorisation, the pivot (Prometheus scrapes
                   while it waits), approved with `kubectl patch`, the commit steps, ended
    resend-1184    approved too; after the pivot the email goes out and the reship is rejected:
                   unwound, the email's correction waits for a human
    evicted-1185   its pod (ledger tools, like the Jobs' template) is evicted: Orphaned, then
                   one unwind Job (run as the kubelet would)

Each query's expectation is in its panel's entry (sagatest/dashboard.py), evaluated at the end of
the session or at a named moment during it (after Prometheus scraped that state).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import psycopg

from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga_lab.demo.world import connector_env
from agentsaga_lab.world import Fault, World
from sagatest.dashboard import PANELS, Check, Expect
from sagatest.operator_fixtures import Cluster, logged
from sagatest.prometheus_fixtures import Prometheus, free_port

TOOLS = "agentsaga.connectors.tools"
GRAFANA = {"$__rate_interval": "1h", "$__range": "1h", "$tool": ".*"}
EMAIL = {"to": "dana@example.com", "subject": "Your order 1183",
         "body": "We are reshipping your order.", "correction_template": "correction"}


def metrics_env(port: int) -> dict[str, str]:
    return {"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_TRACES_EXPORTER": "none",
            "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
            "OTEL_EXPORTER_PROMETHEUS_PORT": str(port)}


def approve(cluster: Cluster, run: str, plan_hash: str) -> None:
    patch = {"status": {"approval": {"planHash": plan_hash, "decision": "Approved",
                                     "approver": "alice", "reason": "policy ok"}}}
    done = cluster.approver_kubectl("patch", "agentrun", run, "--subresource=status",
                                    "--type=merge", "-p", json.dumps(patch))
    assert done.returncode == 0, done.stderr


def session(cluster: Cluster, world: World, prometheus: Callable[..., Prometheus]
            ) -> tuple[Prometheus, dict[str, float]]:
    """Runs the session; returns Prometheus and the moments (unix times) the panels name."""
    ports = {"operator": free_port(), "agent": free_port(), "evicted": free_port()}
    for run in ("quick-lookup", "refund-1182", "reship-1183", "resend-1184"):
        cluster.apply_agentrun(run, agent="support-agent")
    cluster.apply_agentrun("evicted-1185", agent="support-agent", orphanGracePeriodSeconds=1)
    cluster.start_operator("--standalone", env={**metrics_env(ports["operator"]),
                                                "AGENTSAGA_JOB_DEADLINE_SECONDS": "600"})
    env = {**connector_env(world.url), "AGENTSAGA_RECHECK_PAUSE_S": "0.2"}
    agent_pod = cluster.create_pod("support-agent-0", "many")
    agent = cluster.start_sidecar(agent_pod, env={**env, **metrics_env(ports["agent"])},
                                  tools=TOOLS).client()
    evicted_pod = cluster.create_pod("support-agent-1", "evicted-1185")
    # the ledger tools, as the operator's Job template (sagatest.operator_fixtures) loads them
    evicted = cluster.start_sidecar(evicted_pod, env=metrics_env(ports["evicted"])).client()
    prom = prometheus({job: [f"127.0.0.1:{port}"] for job, port in ports.items()})
    prom.scraped()  # every counter series exists at 0 before anything happens
    moments: dict[str, float] = {}
    world.faults.add(Fault("POST", "/rest/api/3/issue", "commit_then_504", on_call=1))
    world.warehouse.reject_reships(True)

    agent.begin_run("quick-lookup", agent="support-agent")
    agent.dispatch("quick-lookup", "search_orders", {"order_id": "1181"})
    agent.end_run("quick-lookup")
    prom.scraped()

    run = "refund-1182"
    agent.begin_run(run, agent="support-agent")
    agent.dispatch(run, "search_orders", {"order_id": "1182"})
    ticket = {"summary": "Refund for order 1182", "order_id": "1182"}
    outcome = agent.dispatch_raw(run, "create_ticket", ticket)
    assert outcome.outcome == pb.UNKNOWN, outcome
    moments["unknown"] = prom.scraped()
    agent.dispatch(run, "create_ticket", {**ticket, "summary": "Order #1182 refund"})
    agent.dispatch(run, "charge_card", {"customer_id": "cus_1182", "amount": 500,
                                        "order_id": "1182"})
    failed = agent.dispatch_raw(run, "reship", {"order_id": "1182", "items": ["sku-42"]})
    assert failed.outcome == pb.FAILED, failed
    assert agent.unwind(run).settled
    prom.scraped()

    run = "reship-1183"
    agent.begin_run(run, agent="support-agent")
    agent.dispatch(run, "search_orders", {"order_id": "1183"})
    draft = agent.dispatch(run, "create_ticket_draft", {"summary": "Reship 1183",
                                                        "order_id": "1183"})
    charge = agent.dispatch(run, "charge_card", {"customer_id": "cus_1183", "amount": 1500,
                                                 "order_id": "1183"})
    commit: list[dict[str, Any]] = [
        {"tool": "capture_payment", "args": {"payment_intent": charge["id"]}},
        {"tool": "open_ticket", "args": {"ticket": draft["id"]}},
        {"tool": "send_email", "args": EMAIL}]
    staged = agent.reach_pivot(run, commit)
    cluster.wait_phase(run, "AwaitingApproval")
    moments["pivot_waiting"] = prom.scraped()
    approve(cluster, run, staged.plan_hash)
    assert agent.await_decision(run, 20).state == "Approved"
    for step in commit:
        agent.dispatch(run, step["tool"], step["args"])
    agent.end_run(run)
    prom.scraped()  # the second approval lands in a histogram Prometheus already holds

    run = "resend-1184"
    agent.begin_run(run, agent="support-agent")
    agent.dispatch(run, "search_orders", {"order_id": "1184"})
    agent.dispatch(run, "charge_card", {"customer_id": "cus_1184", "amount": 900,
                                        "order_id": "1184"})
    email = {**EMAIL, "subject": "Your order 1184"}
    commit = [
        {"tool": "send_email", "args": email},
        {"tool": "reship", "args": {"order_id": "1184", "items": ["sku-7"]}}]
    staged = agent.reach_pivot(run, commit)
    cluster.wait_phase(run, "AwaitingApproval")
    approve(cluster, run, staged.plan_hash)
    assert agent.await_decision(run, 20).state == "Approved"
    agent.dispatch(run, "send_email", email)
    rejected = agent.dispatch_raw(run, "reship", commit[1]["args"])
    assert rejected.outcome == pb.FAILED, rejected
    assert agent.unwind(run).settled
    with psycopg.connect(cluster.dsn) as conn:  # the email's correction waits for a human
        corrections = conn.execute("SELECT tool, state FROM corrections WHERE run_id = %s",
                                   (logged(run),)).fetchall()
    assert [c for c in corrections if c[1] != "Silent"] == [("send_email", "Proposed")]

    run = "evicted-1185"
    evicted.begin_run(run, agent="support-agent")
    evicted.dispatch(run, "create_ticket", {"summary": "Reship 1185", "order_id": "1185"})
    # bound to its pod before the eviction: the run is orphaned once (the panel counts it)
    cluster.wait_run(run, lambda o: ((o.get("status") or {}).get("pod") or {}).get("uid")
                     == evicted_pod["metadata"]["uid"])
    # the Job's pod waits (the node cordoned) until the orphaned run has been scraped
    with cluster.holding_pods():
        cluster.kube.evict("default", "support-agent-1")
        [job] = cluster.wait_jobs(1)
        assert job["spec"]["activeDeadlineSeconds"] == 600  # the deadline the orphan alert adds
        cluster.wait_phase(run, "Unwinding")
        moments["orphaned"] = prom.scraped()
    done = cluster.job_result(job)
    assert done.returncode == 0 and done.succeeded, done.output
    cluster.wait_phase(run, "Unwound")
    moments["end"] = prom.scraped()
    return prom, moments


def passes(value: float, check: Check) -> bool:
    op, expected = check
    if math.isnan(value):
        return False
    if op == "==":  # counts; increase() extrapolates a little past the last sample, upwards
        return expected - 1e-9 <= value < expected + 0.5
    return {">": value > expected, ">=": value >= expected, "<": value < expected}[op]


def judge(prom: Prometheus, expr: str, expect: Expect, at: float) -> list[str]:
    for name, value in GRAFANA.items():
        expr = expr.replace(name, value)
    found = prom.query(expr, at)
    if not found:
        return ["returned no series"]
    problems = []
    for key, check in expect.series.items():
        chosen = found if key == "*" else [  # "unwind started": each word is a label value
            r for r in found if set(key.split()) <= set(r["metric"].values())]
        if not chosen:
            problems.append(f"no series labelled {key!r} in {found}")
        bad = [r for r in chosen if not passes(r["value"], check)]
        if bad:
            problems.append(f"{key!r}: expected {check[0]} {check[1]}, got {bad}")
    return problems


def test_every_dashboard_panel_shows_what_the_session_did(
        cluster: Cluster, world: World, prometheus_factory: Any) -> None:
    prom, moments = session(cluster, world, prometheus_factory)
    failures = []
    for panel in PANELS:
        for ref, query in zip("ABCDEFGH", panel.queries, strict=False):
            assert query.expect, f"panel {panel.title!r} query {ref} has no expectation"
            for expect in query.expect:
                for problem in judge(prom, query.expr, expect, moments[expect.at]):
                    failures.append(f"panel {panel.title!r}, query {ref} at {expect.at}: "
                                    f"{problem}")
    assert not failures, "\n".join(failures)
