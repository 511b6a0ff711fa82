"""R9 end to end on the world: what the customer saw waits for a human, and is sent once."""

from __future__ import annotations

import subprocess
import sys

from agentsaga.connectors.tools import register_all
from agentsaga.saga import corrections, pivot
from agentsaga.saga.registry import Registry
from agentsaga.saga.resolution import unwind_run
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.store import SagaLog
from agentsaga_lab.demo.world import connector_env
from agentsaga_lab.world import Fault, World
from sagatest.sidecar_fixtures import ROOT

EMAIL = {"to": "dana@example.com", "subject": "Your refund", "body": "It is on its way.",
         "correction_template": "correction"}


def customer_emails(world: World) -> list[dict[str, object]]:
    return [e for e in world.truth()["emails"] if "dana@example.com" in str(e["to"])]


def test_unwound_customer_email_queues_one_correction_sent_only_after_approval(
        pg: str, world: World) -> None:
    registry = register_all(Registry(), env=connector_env(world.url))
    saga_log = SagaLog(pg, min_size=1, max_size=4).open()
    try:
        dispatcher = SagaService(saga_log, registry, Settings(recheck_pause_s=0.01))
        dispatcher.begin_run("apology-run")
        dispatcher.dispatch("apology-run", "create_ticket",
                            {"summary": "Refund for order 1182", "order_id": "1182"})
        staged = dispatcher.reach_pivot("apology-run", [{"tool": "send_email", "args": EMAIL}])
        pivot.record_decision(saga_log, "apology-run", staged.plan_hash, "Approved", "alice")
        assert dispatcher.dispatch("apology-run", "send_email", EMAIL).outcome == "CONFIRMED"
        assert len(customer_emails(world)) == 1

        report = unwind_run(saga_log, registry, "apology-run", "unwind-job", recheck_pause_s=0.01)
        queued = [c for c in saga_log.corrections("apology-run")
                  if c.state == "Proposed"]
        assert [(c.tool, c.audience) for c in queued] == [("send_email", ["customer"])]
        assert [c["state"] for c in report.to_json()["corrections"]][-1] == "Proposed"
        assert len(customer_emails(world)) == 1  # nothing sent by the unwind itself
        assert corrections.send_approved(saga_log, registry, "apology-run") == []
        assert len(customer_emails(world)) == 1

        listed = subprocess.run(
            [sys.executable, "-m", "agentsaga.cli", "corrections", "--dsn", pg, "--run",
             "apology-run", "--approve", str(queued[0].step_idx), "--approver", "alice"],
            capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert "Approved by alice" in listed.stdout
        twice = subprocess.run(
            [sys.executable, "-m", "agentsaga.cli", "corrections", "--dsn", pg, "--run",
             "apology-run", "--dismiss", str(queued[0].step_idx)],
            capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert twice.returncode == 2 and "is Approved, not Proposed" in twice.stderr

        # the email API takes the correction, then times out: the correction stays Sending...
        world.faults.add(Fault("POST", "/emails", "commit_then_504", on_call=1))
        lost = corrections.send_approved(saga_log, registry, "apology-run")
        assert [r["sent"] for r in lost] == [False]
        assert [c.state for c in saga_log.corrections("apology-run")
                if c.tool == "send_email"] == ["Sending"]
        # ...and the next sender finds it by its key instead of sending it again
        sent = corrections.send_approved(saga_log, registry, "apology-run")
        again = corrections.send_approved(saga_log, registry, "apology-run")
        emails = customer_emails(world)
        assert [r["sent"] for r in sent] == [True] and again == []
        assert len(emails) == 2 and "disregard" in str(emails[1]["text"]).lower()
        assert [c.state for c in saga_log.corrections("apology-run")
                if c.tool == "send_email"] == ["Sent"]
    finally:
        saga_log.close()
