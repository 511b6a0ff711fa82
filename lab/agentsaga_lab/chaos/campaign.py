"""A chaos campaign: seeded runs over the registered connectors against the in-process world,
with faults injected, what died restarted, and the invariants checked at the end.

Run `index` of seed `seed` draws everything from `random.Random(f"{seed}:{index}")`, so
`agentsaga chaos --seed S --only-run I` replays one run exactly as the campaign drew it.
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from agentsaga.cli.job_commands import NEEDS_HUMAN_EXIT
from agentsaga.connectors.tools import SEARCHED_TOOLS
from agentsaga.saga import pivot
from agentsaga.store import SagaLog
from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga_lab.chaos import faults as fk
from agentsaga_lab.chaos.agent import Agent
from agentsaga_lab.chaos.invariants import Answer, Violation, check
from agentsaga_lab.chaos.processes import EmbeddedPostgres, Output, Processes, Sidecar
from agentsaga_lab.chaos.scan import hostile_body, scan
from agentsaga_lab.world import Fault, World

TOOLS = "agentsaga.connectors.tools"
CARD = "4242 4242 4242 4242"
"""A card number planted in every charge's arguments; it must never be stored or printed."""
COMP_TOOLS = ("cancel_or_refund_payment", "close_ticket")


@dataclass(frozen=True)
class CampaignConfig:
    seed: int = 7
    runs: int = 12
    dsn: str | None = None
    only_run: int | None = None
    recheck_pause_s: float = 0.1
    connector_timeout_s: float = 1.0
    stripe_key: str = ""
    search_lag_s: float = 1.0
    """The most the world's search lags in a campaign (its faults stay below it)."""
    db_wait_s: float = 30.0
    """How long to wait for the saga log's Postgres at start (AGENTSAGA_DB_WAIT_S)."""


@dataclass
class CampaignResult:
    runs: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    not_reached: Counter[str] = field(default_factory=Counter)
    violations: list[tuple[Violation, int]] = field(default_factory=list)
    output: Output = field(default_factory=Output)

    @property
    def fault_count(self) -> int:
        return sum(self.faults.values())


class Campaign:
    def __init__(self, config: CampaignConfig, say: Callable[[str], None] = print) -> None:
        self.config = config
        self.say = say
        self.result = CampaignResult()
        self.answers: list[Answer] = []
        self.run_index: dict[str, int] = {}
        self.nonce = secrets.token_hex(3)
        self.stripe_key = config.stripe_key or f"sk_test_chaos_{secrets.token_hex(8)}"
        """What the connectors send to the world's Stripe: never to be found in clear."""

    # -- setup -----------------------------------------------------------------------------

    def run(self) -> CampaignResult:
        with tempfile.TemporaryDirectory(prefix="agentsaga-chaos-") as tmp, \
                contextlib.ExitStack() as started:  # stopped in reverse, whatever failed
            pg = None if self.config.dsn else EmbeddedPostgres(Path(tmp) / "pg")
            if pg is not None:
                started.callback(pg.stop)
            dsn = self.config.dsn or (pg.dsn if pg else "")
            saga_log = SagaLog(dsn, min_size=1, max_size=4).open(timeout=self.config.db_wait_s)
            started.callback(saga_log.close)
            world = World().start()
            started.callback(world.stop)
            env = {
                "AGENTSAGA_STRIPE_API_BASE": world.url,
                "AGENTSAGA_STRIPE_API_KEY": self.stripe_key,
                # tickets go to Jira: no idempotency key, a lagging search (the hard case)
                "AGENTSAGA_JIRA_URL": world.url, "AGENTSAGA_JIRA_PROJECT": "SUP",
                "AGENTSAGA_EMAIL_URL": world.url,
                "AGENTSAGA_EMAIL_FROM": "support@shop.example",
                "AGENTSAGA_CONNECTOR_TIMEOUT_S": str(self.config.connector_timeout_s),
                "AGENTSAGA_RECHECK_PAUSE_S": str(self.config.recheck_pause_s),
                # R7: the world's search lags at most `search_lag_s`; that is its contract
                "AGENTSAGA_TIME_CONTRACTS": json.dumps({
                    tool: {"visible_within_s": self.config.search_lag_s}
                    for tool in SEARCHED_TOOLS}),
            }
            procs = Processes(dsn, TOOLS, env, self.result.output)
            started.callback(procs.stop_all)
            self._campaign(world, pg, saga_log, procs, dsn)
        # every process stopped: the whole of what they printed is in
        self._scan({"the output of the sidecars and Jobs": self.result.output.text()})
        return self.result

    def _scan(self, outputs: dict[str, str]) -> None:
        """The hostile-output scan (`agentsaga_lab.chaos.scan`) of `outputs`."""
        for violation in scan(outputs, [self.stripe_key]):
            self.result.violations.append((violation, -1))

    def _campaign(self, world: World, pg: EmbeddedPostgres | None, saga_log: SagaLog,
                  procs: Processes, dsn: str) -> None:
        pods: dict[str, Sidecar] = {}

        def pod() -> Sidecar:
            if "pod" not in pods or not pods["pod"].alive:
                pods["pod"] = procs.sidecar("pod")  # restart what died
            return pods["pod"]

        ctx = RunContext(self, world, pg, saga_log, procs, pod, Agent(pod, self.answers))
        indices = ([self.config.only_run] if self.config.only_run is not None
                   else range(self.config.runs))
        for index in indices:
            run_id = f"chaos-{self.config.seed}-{index}-{self.nonce}"
            self.run_index[run_id] = index
            line = ctx.one(index, run_id, random.Random(f"{self.config.seed}:{index}"))
            self.result.runs += 1
            self.say(line)
        manual = {t.name for t in pod().client.list_tools() if not t.has_lookup}
        runs, steps = saga_log.raw_rows(f"chaos-{self.config.seed}-%-{self.nonce}")
        for violation in check(runs, steps, world.truth(), self.answers,
                               human_settled_tools=manual):
            self.result.violations.append((violation, self.run_index.get(violation.run_id, -1)))
        tables = saga_log.every_table_text()
        self._scan({"what the agent was told": "\n".join(ctx.agent.told),
                    **{f"table {name}": text for name, text in tables.items()}})


@dataclass
class RunContext:
    campaign: Campaign
    world: World
    pg: EmbeddedPostgres | None
    saga_log: SagaLog
    procs: Processes
    pod: Callable[[], Sidecar]
    agent: Agent

    def fired(self, kind: str, ok: bool) -> None:
        (self.campaign.result.faults if ok else self.campaign.result.not_reached)[kind] += 1

    # -- one run ---------------------------------------------------------------------------

    def one(self, index: int, run_id: str, rng: random.Random) -> str:
        forward = rng.sample(["charge_card", "create_ticket"], k=rng.choice((1, 2)))
        ending = rng.choice(("commit", "commit", "unwind", "unwind", "end"))
        planned = fk.draw(rng, len(forward), ending, embedded_pg=self.pg is not None)
        self.agent.begin(run_id)
        refs: dict[str, str] = {}
        for i, tool in enumerate(forward):
            fault = next((f.kind for f in planned if f.step == i), None)
            args = self.args_for(tool, index, rng)
            result = self.step(run_id, tool, args, fault)
            if result is not None and "id" in result:
                refs[tool] = str(result["id"])
        unwind_fault = next((f.kind for f in planned if f.step == -1), None)
        if ending == "commit" and not self.commit(run_id, index, refs):
            self.unwind(run_id, None)  # the plan could not be staged: undo what was done
        elif ending == "unwind":
            self.unwind(run_id, unwind_fault)
        else:
            self.agent._retrying(lambda sc: sc.client.end_run(run_id, "Succeeded"), run_id)
        kinds = ",".join(f.kind for f in planned) or "-"
        return (f"run {index:>4}  {'+'.join(forward):<26} ending={ending:<6} faults={kinds}")

    def args_for(self, tool: str, index: int, rng: random.Random) -> dict[str, Any]:
        order = str(1000 + index)
        if tool == "charge_card":
            return {"customer_id": f"cus_{index}", "amount": rng.choice((500, 1299, 4200)),
                    "order_id": order, "reason": f"refund difference, card {CARD} on file"}
        return {"summary": f"Refund for order {order}", "order_id": order}

    def step(self, run_id: str, tool: str, args: dict[str, Any],
             fault: str | None) -> dict[str, Any] | None:
        if fault is None:
            return self.agent.call(run_id, tool, args)
        if fault.startswith("crash:"):
            return self.crash(run_id, tool, args, fault.split(":", 1)[1], fault)
        if fault.startswith("world:"):
            return self.world_fault(run_id, tool, args, fault)
        if fault == "sidecar_sigkill":
            return self.kill_in_flight(run_id, tool, args)
        if fault == "postgres_restart":
            assert self.pg is not None
            self.pg.restart()
            self.saga_log.reconnect()  # drop the campaign's own connections to the old server
            self.fired(fault, True)
            return self.agent.call(run_id, tool, args)
        if fault == "concurrent_dispatch":
            return self.concurrent(run_id, tool, args)
        if fault == "late_confirm":
            return self.late_confirm(run_id, tool, args)
        raise ValueError(f"unknown fault kind {fault!r}")

    def _add(self, tool: str, kind: str, seconds: float = 30.0) -> Fault:
        method, path = fk.ROUTES[tool]
        return self.world.faults.add(Fault(method, path, kind, on_call=1,  # type: ignore[arg-type]
                                           seconds=seconds))

    def crash(self, run_id: str, tool: str, args: dict[str, Any], point: str,
              kind: str) -> dict[str, Any] | None:
        if point == "during_reconcile":  # make the step unknown first, then reconcile and die
            self._add(tool, "commit_then_504")
            reply = self.pod().client.dispatch_raw(run_id, tool, args)
            self.agent.note(run_id, reply)
        name = point if point == "during_reconcile" else f"{point}:{tool}"
        doomed = self.procs.sidecar("doomed", crash_at=name)
        died = False
        try:
            doomed.client.begin_run(run_id, agent="chaos")  # the resumed pod adopts the run
            reply = doomed.client.dispatch_raw(run_id, tool, args)
            self.agent.note(run_id, reply)
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                raise
            died = doomed.wait() == -9  # it killed itself at the crash point
        if not died:
            doomed.stop()
        self.fired(kind, died)
        self.agent.begin(run_id)  # the next pod adopts (R12) and the agent calls again
        return self.agent.call(run_id, tool, args)

    def world_fault(self, run_id: str, tool: str, args: dict[str, Any],
                    kind: str) -> dict[str, Any] | None:
        if kind == "world:hostile_reject":  # nothing happens; the answer says secrets
            method, path = fk.ROUTES[tool]
            fault = self.world.faults.add(Fault(
                method, path, "reject", on_call=1, status=402,
                body=hostile_body(self.campaign.stripe_key)))
        elif kind == "world:search_lag":  # beyond the re-check pause, within the contract
            self.world.config.search_lag = min(self.campaign.config.recheck_pause_s * 6,
                                               self.campaign.config.search_lag_s)
            fault = self._add(tool, "commit_then_504")
        else:
            fault = self._add(tool, kind.split(":", 1)[1], seconds=3.0)
        try:
            return self.agent.call(run_id, tool, args)
        finally:
            self.world.config.search_lag = 0.0
            self.fired(kind, fault.fired > 0)
            self.world.faults.clear()

    def kill_in_flight(self, run_id: str, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
        fault = self._add(tool, "drop_response", seconds=5.0)
        sidecar = self.pod()
        thread = threading.Thread(target=_swallow, args=(sidecar, run_id, tool, args))
        thread.start()
        deadline = time.monotonic() + 10
        while fault.fired == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        hit = fault.fired > 0 and sidecar.kill() == -9
        thread.join()
        self.world.faults.clear()
        self.fired("sidecar_sigkill", hit)
        return self.agent.call(run_id, tool, args)

    def _held(self, tool: str, seconds: float) -> Fault:
        """The tool's next call is held `seconds` on the wire, then committed and answered."""
        return self._add(tool, "delay", seconds=seconds)

    def _until_fired(self, fault: Fault) -> bool:
        deadline = time.monotonic() + 10
        while fault.fired == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        return fault.fired > 0

    def late_confirm(self, run_id: str, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
        """The pod's call is held; a second pod adopts the run meanwhile; the call confirms to a
        fenced writer, which records what it saw (an observation) instead of dropping it."""
        fault = self._held(tool, self.campaign.config.connector_timeout_s * 0.6)
        sidecar = self.pod()
        thread = threading.Thread(target=_swallow, args=(sidecar, run_id, tool, args))
        thread.start()
        held = self._until_fired(fault)
        peer = self.procs.sidecar("peer")
        try:
            peer.client.begin_run(run_id, agent="chaos")  # fences the pod mid-call (R12)
            thread.join()
        finally:
            peer.stop()
            self.world.faults.clear()
        self.fired("late_confirm", held)
        self.agent.begin(run_id)  # the agent's pod adopts again and calls again
        return self.agent.call(run_id, tool, args)

    def concurrent(self, run_id: str, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
        peer = self.procs.sidecar("peer")
        try:
            peer.client.begin_run(run_id, agent="chaos")  # a second pod adopts the run
            barrier = threading.Barrier(2)
            replies: list[pb.DispatchResponse] = []

            def go(sidecar: Sidecar) -> None:
                barrier.wait()
                with contextlib.suppress(grpc.RpcError):  # ABORTED: fenced out (R12)
                    replies.append(sidecar.client.dispatch_raw(run_id, tool, args))

            threads = [threading.Thread(target=go, args=(s,)) for s in (self.pod(), peer)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for reply in replies:
                self.agent.note(run_id, reply)
            self.fired("concurrent_dispatch", True)
        finally:
            peer.stop()
        self.agent.begin(run_id)
        return self.agent.call(run_id, tool, args)

    # -- endings ---------------------------------------------------------------------------

    def commit(self, run_id: str, index: int, refs: dict[str, str]) -> bool:
        plan: list[dict[str, Any]] = []
        if "charge_card" in refs:
            plan.append({"tool": "capture_payment",
                         "args": {"payment_intent": refs["charge_card"]}})
        plan.append({"tool": "send_email", "args": {
            "to": f"customer{index}@example.com", "subject": f"Your order {1000 + index}",
            "body": "We refunded the difference."}})
        try:
            staged = self.agent._retrying(lambda sc: sc.client.reach_pivot(run_id, plan), run_id)
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.FAILED_PRECONDITION:
                raise
            return False
        pivot.record_decision(self.saga_log, run_id, staged.plan_hash, "Approved",
                              "chaos-approver", "campaign")
        for item in plan:
            self.agent.call(run_id, item["tool"], item["args"])
        self.agent._retrying(lambda sc: sc.client.end_run(run_id, "Succeeded"), run_id)
        return True

    def unwind(self, run_id: str, fault: str | None) -> None:
        if fault == "zombie_pod":
            self.zombie(run_id)
            return
        if fault == "unwind_in_flight":
            self.unwind_in_flight(run_id)
            return
        crash_at = ",".join(f"after_compensation:{t}" for t in COMP_TOOLS) \
            if fault == "crash:after_compensation" else ""
        job = self.procs.job("unwind", run_id, crash_at=crash_at)
        if fault == "job_sigkill":
            self._wait_adopted(run_id, job)
            if job.poll() is None:
                job.kill()
        code = self.procs.finish_job(job)
        if fault is not None:
            self.fired(fault, code == -9)
        for _ in range(3):  # restart the Job until the run is settled
            if code in (0, NEEDS_HUMAN_EXIT):  # settled, or only a person can go on
                return
            code = self.procs.finish_job(self.procs.job("unwind", run_id))

    def _wait_adopted(self, run_id: str, job: Any) -> None:
        epoch = self.saga_log.require_run(run_id).owner_epoch
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and job.poll() is None:
            if self.saga_log.require_run(run_id).owner_epoch > epoch:
                return
            time.sleep(0.01)

    def unwind_in_flight(self, run_id: str) -> None:
        """An unwind Job starts while one more charge is held on the wire, then committed: the
        Job must not settle it as never happened before the call's deadline."""
        fault = self._held("charge_card", self.campaign.config.connector_timeout_s * 0.6)
        sidecar = self.pod()
        args = {"customer_id": "cus_inflight", "amount": 700, "order_id": run_id[-6:],
                "reason": "in flight during the unwind"}
        thread = threading.Thread(target=self._in_flight, args=(sidecar, run_id, args))
        thread.start()
        held = self._until_fired(fault)
        job = self.procs.job("unwind", run_id)
        thread.join()
        code = self.procs.finish_job(job)
        self.world.faults.clear()
        self.fired("unwind_in_flight", held)
        for _ in range(3):
            if code == 0:
                return
            code = self.procs.finish_job(self.procs.job("unwind", run_id))

    def _in_flight(self, sidecar: Sidecar, run_id: str, args: dict[str, Any]) -> None:
        with contextlib.suppress(grpc.RpcError):  # ABORTED: the Job fenced it mid-call
            self.agent.note(run_id, sidecar.client.dispatch_raw(run_id, "charge_card", args))

    def zombie(self, run_id: str) -> None:
        """The evicted pod is still alive and keeps calling while the Job unwinds its run."""
        evicted = self.pod()
        job = self.procs.job("unwind", run_id)
        self._wait_adopted(run_id, job)
        try:
            reply = evicted.client.dispatch_raw(run_id, "create_ticket",
                                                {"summary": "late call", "order_id": "zombie"})
            self.agent.note(run_id, reply)
            refused = False
        except grpc.RpcError as exc:
            refused = exc.code() in (grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION)
        code = self.procs.finish_job(job)
        self.fired("zombie_pod", refused)
        for _ in range(3):
            if code in (0, NEEDS_HUMAN_EXIT):  # settled, or only a person can go on
                return
            code = self.procs.finish_job(self.procs.job("unwind", run_id))


def _swallow(sidecar: Sidecar, run_id: str, tool: str, args: dict[str, Any]) -> None:
    with contextlib.suppress(grpc.RpcError):  # the sidecar is killed under it
        sidecar.client.dispatch_raw(run_id, tool, args)
