"""`agentsaga prune --ended-before DURATION`: only runs that ended before the cutoff go, whole
(rows and corrections with them); never an open run, never a run with an unsettled row or a
correction that still waits; a crash between batches leaves whole runs and a rerun finishes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentsaga.saga.registry import Compensation, Registry
from agentsaga.service.saga_service import SagaService
from agentsaga.settings import Settings
from agentsaga.states import RunState
from agentsaga.store import SagaLog
from agentsaga.store.provisioning import fill_ended_runs
from sagatest.cli_tools import agentsaga

DAY = 86400.0


def _registry() -> Registry:
    registry = Registry()

    def undo(args: dict[str, Any], key: str) -> Compensation:
        return Compensation("reserve", {"sku": "undo"})

    @registry.tool(cls="reversible", compensate=undo, lookup=lambda key: None)
    def reserve(sku: str, idempotency_key: str) -> dict[str, str]:
        return {"id": f"r-{idempotency_key[:8]}"}

    return registry


def _prune(dsn: str, *args: str, env: dict[str, str] | None = None,
           cwd: Path) -> dict[str, int]:
    done = agentsaga("prune", "--dsn", dsn, "--json", *args, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    out: dict[str, int] = json.loads(done.stdout)
    return out


def test_prune_removes_only_runs_that_ended_before_the_cutoff(pg: str, tmp_path: Path) -> None:
    fill_ended_runs(pg, 30, prefix="old", steps_per_run=3, ended_ago_s=10 * DAY)
    fill_ended_runs(pg, 9, prefix="recent", steps_per_run=3, ended_ago_s=DAY)
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        service = SagaService(saga_log, _registry(), Settings(recheck_pause_s=0))
        service.begin_run("live-run")  # open, long ago or not: never pruned
        assert service.dispatch("live-run", "reserve", {"sku": "a"}).outcome == "CONFIRMED"
        # ended, but a row is INTENDED (a crash after the intent): R7 still needs it
        service.begin_run("unsettled-run")
        epoch = saga_log.require_run("unsettled-run").owner_epoch
        saga_log.record_intent("unsettled-run", epoch, 0, tool="reserve", tool_class="reversible",
                               key="k-unsettled", args={"sku": "b"}, compensation=None,
                               audience=["agent"])
        saga_log.set_run_state("unsettled-run", epoch, RunState.FAILED, end=True)

        dry = _prune(pg, "--ended-before", "5d", "--dry-run", cwd=tmp_path)
        assert (dry["runs"], dry["steps"]) == (10, 30)
        assert {r.run_id for r in saga_log.runs()} >= {"old-0", "old-9"}  # dry: nothing gone

        out = _prune(pg, "--ended-before", "5d", "--batch", "3", cwd=tmp_path)
        assert (out["runs"], out["steps"]) == (10, 30)
        left = {r.run_id for r in saga_log.runs()}
        assert not any(r.startswith("old-") for r in left)
        assert {f"recent-{i}" for i in range(3)} | {"live-run", "unsettled-run"} == left
        assert len(saga_log.steps("recent-0")) == 3

        # a cutoff of now: the recent runs go too; the open and the unsettled run stay
        out = _prune(pg, "--ended-before", "0s", cwd=tmp_path)
        assert out["runs"] == 3
        assert {r.run_id for r in saga_log.runs()} == {"live-run", "unsettled-run"}
        assert [s.status for s in saga_log.steps("live-run")] == ["CONFIRMED"]
        assert [s.status for s in saga_log.steps("unsettled-run")] == ["INTENDED"]


def test_a_crash_between_batches_leaves_whole_runs(pg: str, tmp_path: Path) -> None:
    fill_ended_runs(pg, 40, prefix="old", steps_per_run=4, ended_ago_s=10 * DAY)
    done = agentsaga("prune", "--dsn", pg, "--ended-before", "1d", "--batch", "4", cwd=tmp_path,
                     env={"AGENTSAGA_CRASH_AT": "after_prune_batch"})
    assert done.returncode != 0  # killed after its first batch committed
    with SagaLog(pg, min_size=1, max_size=2).open() as saga_log:
        left = saga_log.runs()
        assert len(left) == 6  # one batch of 4 went, whole
        for run in left:
            assert [s.step_idx for s in saga_log.steps(run.run_id)] == [0, 1, 2, 3]
    out = _prune(pg, "--ended-before", "1d", cwd=tmp_path)
    assert (out["runs"], out["steps"]) == (6, 24)


def test_a_bad_duration_says_how_to_write_one(pg: str, tmp_path: Path) -> None:
    done = agentsaga("prune", "--dsn", pg, "--ended-before", "ten days", cwd=tmp_path)
    assert done.returncode == 2
    assert "e.g. 30d, 12h or 1h30m" in done.stderr
