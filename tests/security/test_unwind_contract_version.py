"""Unwind runs a compensation only for a step that carries the version of its tool's contract
(every dispatch records one): a CONFIRMED row without it, whatever wrote it (a superuser, an
older writer, an attacker past every other check), has its compensation refused with the
reason and left to a person; the steps before it are still undone (real Postgres, B's Job
credential, the registry of `tenant_world`)."""

from __future__ import annotations

import json

import psycopg

from agentsaga.keys import step_key
from agentsaga.saga.resolution import unwind_run
from agentsaga.saga.unwind import NOT_DECLARED
from agentsaga.states import CompensationStatus
from agentsaga.store import SagaLog
from sagatest import tenant_world
from sagatest.tenant_world import ATTACKER, VICTIM


def test_a_step_without_its_contract_version_is_left_to_a_person(pg: str) -> None:
    tenant_world.PAYOUTS.clear()
    world = tenant_world.build(pg)
    with psycopg.connect(world.admin) as conn:  # the compensation is the one `charge` declares
        conn.execute(
            "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
            " status, external_ref, compensation, writer_epoch) VALUES (%s, 3, 'charge',"
            " 'compensatable', %s, %s, 'CONFIRMED', 'ch_x', %s, 1)",
            (VICTIM, step_key(VICTIM, 3, "charge"), json.dumps(ATTACKER),
             json.dumps({"tool": "payout", "args": ATTACKER})))
    with SagaLog(world.b_job, min_size=1, max_size=2).open(migrate=False) as log:
        report = unwind_run(log, tenant_world.build_registry(), VICTIM, "job",
                            recheck_pause_s=0.01)
        step = log.step(VICTIM, 3)
    assert tenant_world.PAYOUTS == [tenant_world.CUSTOMER]  # step 0 undone, step 3 not
    [refused] = report.failed
    assert refused["step_idx"] == 3 and refused["why"].startswith(NOT_DECLARED)
    assert "carries no version of tool 'charge''s contract" in refused["why"]
    assert report.needs_human and 3 in [w["step_idx"] for w in report.waiting]
    assert step is not None and step.comp_status == CompensationStatus.FAILED
