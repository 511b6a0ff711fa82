"""A scripted agent that behaves as the system prompt asks: an unknown outcome is followed by
the same call again, never by new arguments; a dead sidecar is restarted and the run adopted
(BeginRun on the new sidecar: only BeginRun adopts a run, R12)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import grpc

from agentsaga.v1 import sidecar_pb2 as pb
from agentsaga_lab.chaos.invariants import Answer
from agentsaga_lab.chaos.processes import Sidecar

ANSWERED = ("CONFIRMED", "FAILED", "UNKNOWN")


class Agent:
    """Drives one run at a time through `pod()`, the current sidecar of the agent's pod."""

    def __init__(self, pod: Callable[[], Sidecar], answers: list[Answer]) -> None:
        self.pod = pod
        self.answers = answers
        self.sent: dict[tuple[str, str], dict[str, Any]] = {}
        """The arguments of each (run, tool) as the agent last sent them (its transcript)."""
        self.begun_on: dict[str, Sidecar] = {}
        """The sidecar that last began (adopted) each run."""
        self.told: list[str] = []
        """Every answer's message and result, as the agent read them (scanned for secrets)."""

    def note(self, run_id: str, reply: pb.DispatchResponse) -> str:
        outcome = pb.Outcome.Name(reply.outcome)
        self.told.append(f"{reply.message}\n{reply.result_json}")
        if reply.idempotency_key and outcome in ANSWERED:
            self.answers.append(Answer(run_id, reply.step_idx, reply.idempotency_key, outcome))
        return outcome

    def begin(self, run_id: str) -> None:
        self._retrying(lambda sc: self._begin_on(sc, run_id), run_id, begin=False)

    def _begin_on(self, sidecar: Sidecar, run_id: str) -> None:
        sidecar.client.begin_run(run_id, agent="chaos")
        self.begun_on[run_id] = sidecar

    def call(self, run_id: str, tool: str, args: dict[str, Any], *,
             attempts: int = 10) -> dict[str, Any] | None:
        """The tool's result once CONFIRMED; None when the system refused it."""
        self.sent[(run_id, tool)] = args
        for _ in range(attempts):
            reply = self._retrying(lambda sc: sc.client.dispatch_raw(run_id, tool, args), run_id)
            outcome = self.note(run_id, reply)
            if outcome == "STEP_UNRESOLVED":
                self.resolve(run_id, reply.step_idx, attempts)
                continue
            if outcome == "CONFIRMED":
                result: dict[str, Any] = json.loads(reply.result_json or "{}")
                return result
            if outcome in ("FAILED", "NEEDS_HUMAN"):  # NEEDS_HUMAN: stop, as the prompt says
                return None
            if outcome == "NEEDS_APPROVAL":
                raise RuntimeError(f"{tool} needs approval: {reply.message}")
            # UNKNOWN: the same call again (R3, R5), once the harness can be certain (R7)
            time.sleep(_pause(reply))
        return None

    def resolve(self, run_id: str, step_idx: int, attempts: int) -> None:
        """An earlier step is unsettled: call that tool again, as the system prompt says."""
        run = self._retrying(lambda sc: sc.client.get_run(run_id), run_id)
        step = next((s for s in run.steps if s.step_idx == step_idx), None)
        if step is None or step.status not in ("INTENDED", "UNKNOWN"):
            return
        args = self.sent.get((run_id, step.tool)) or json.loads(step.args_json or "{}")
        for _ in range(attempts):
            reply = self._retrying(
                lambda sc: sc.client.dispatch_raw(run_id, step.tool, args), run_id)
            if self.note(run_id, reply) in ("CONFIRMED", "FAILED", "NEEDS_APPROVAL", "NEEDS_HUMAN"):
                return
            time.sleep(_pause(reply))

    def _retrying(self, fn: Callable[[Sidecar], Any], run_id: str, *, begin: bool = True) -> Any:
        """Call the pod's sidecar; restart a dead one (and adopt), wait out an absent Postgres."""
        last: grpc.RpcError | None = None
        for _ in range(60):
            sidecar = self.pod()
            try:
                if begin and run_id in self.begun_on and self.begun_on[run_id] is not sidecar:
                    self._begin_on(sidecar, run_id)  # a restarted sidecar: adopt the run again
                return fn(sidecar)
            except grpc.RpcError as exc:
                last = exc
                code = exc.code()
                if code is grpc.StatusCode.ABORTED and begin:  # fenced: adopt again (R12)
                    self.begin(run_id)
                    continue
                if code is not grpc.StatusCode.UNAVAILABLE:
                    raise
                if not sidecar.alive and begin:
                    self.begin(run_id)
                time.sleep(0.2)
        assert last is not None
        raise last


def _pause(reply: pb.DispatchResponse) -> float:
    """The retry-after the harness gave (bounded), else a short pause."""
    if reply.HasField("retry_after_s"):
        return min(max(reply.retry_after_s, 0.05), 5.0)
    return 0.05
