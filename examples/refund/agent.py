"""The example's agent loop: what a model would decide, as plain code, through the sidecar.

    python agent.py RUN_ID
    EXAMPLE_RUN_ID=RUN_ID python agent.py       (as in its image: agent.Dockerfile)

It quotes the fee (pure), puts a hold on the card (compensatable), reaches the pivot with the
one step a human must approve (the receipt to the customer), waits for the decision, and then
runs exactly the approved step, with the same arguments, and ends the run. A rejection unwinds
the run: the hold is released. AGENTSAGA_ADDRESS says where the sidecar listens.

Every call goes through `call_tool`, which does what the system prompt tells a model to do
(`agentsaga.client.SYSTEM_PROMPT`): on OUTCOME UNKNOWN it calls the same tool again, with the
same arguments, after `retry_after` seconds; the harness then checks the real system (the
tool's lookup) and answers what actually happened, instead of the call being made twice.

In a pod (the image of agent.Dockerfile, next to the sidecar the operator injects), the run id
comes from EXAMPLE_RUN_ID, SIGTERM ends the agent at once (as PID 1 it would otherwise be
ignored until the kubelet kills it), and EXAMPLE_STAY=1 keeps the container running after the
run ends, so that a pod stays Running until it is deleted.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from agentsaga.client import (
    SagaClient,
    SidecarLost,
    ToolCallError,
    ToolNeedsHuman,
    ToolOutcomeUnknown,
)

ADDRESS = os.environ.get("AGENTSAGA_ADDRESS", "127.0.0.1:50051")
CUSTOMER, EMAIL, ORDER = "cus_1182", "dana@example.com", "1182"
ATTEMPTS = 20  # calls of one tool before the agent gives up and leaves the step to a person


def call_tool(client: SagaClient, run_id: str, tool: str, args: dict[str, Any]) -> Any:
    """The tool's result once CONFIRMED. OUTCOME UNKNOWN: the same call again after
    `retry_after` (never new or reworded arguments, never assumed failed or done)."""
    for _ in range(ATTEMPTS):
        try:
            return client.dispatch(run_id, tool, args)
        except SidecarLost as exc:  # the sidecar went away mid-call: call again once it is back
            print(f"{tool}: OUTCOME UNKNOWN ({exc}); calling it again", flush=True)
            client.wait_ready(timeout=60)
        except ToolOutcomeUnknown as exc:
            if exc.retry_after is None:
                raise
            print(f"{tool}: OUTCOME UNKNOWN; calling it again in {exc.retry_after:g} s",
                  flush=True)
            time.sleep(max(exc.retry_after, 0.5))
    sys.exit(f"{tool} is still OUTCOME UNKNOWN after {ATTEMPTS} calls: "
             f"see `agentsaga log --run {run_id}`")


def wait_for_decision(client: SagaClient, run_id: str) -> str:
    """Approved or Rejected; waits up to EXAMPLE_APPROVAL_TIMEOUT_S (default 600) seconds."""
    deadline = time.monotonic() + float(os.environ.get("EXAMPLE_APPROVAL_TIMEOUT_S", "600"))
    while True:
        state = client.await_decision(run_id, timeout=30).state
        if state in ("Approved", "Rejected"):
            return state
        if time.monotonic() > deadline:
            sys.exit(f"no decision on run {run_id} in time; it still awaits approval")


def main(run_id: str) -> int:
    with SagaClient(ADDRESS) as client:
        client.wait_ready()
        client.begin_run(run_id, agent="refund-example")
        quote = call_tool(client, run_id, "quote_fee", {"order_id": ORDER})
        hold = call_tool(client, run_id, "charge_fee", {
            "customer_id": CUSTOMER, "order_id": ORDER, "amount": quote["amount"]})
        print(f"hold {hold['id']} for {quote['amount']} cents", flush=True)

        receipt = {"to": EMAIL, "subject": f"Your order {ORDER}",
                   "body": f"We put a hold of {quote['amount'] / 100:.2f} USD on your card "
                           "for the re-shipping."}
        plan: list[dict[str, Any]] = [{"tool": "send_receipt", "args": receipt}]
        staged = client.reach_pivot(run_id, plan)
        print(f"waiting for approval of plan {staged.plan_hash}:\n"
              f"  agentsaga approve --run {run_id} --plan-hash {staged.plan_hash} "
              "--decision approved", flush=True)
        decided = wait_for_decision(client, run_id)
        if decided != "Approved":
            print(f"plan {decided}: unwinding", flush=True)
            report = client.unwind(run_id)
            print("unwound" if report.settled else "unwound, with steps left for a human")
            return 1
        try:
            for step in plan:  # exactly the approved calls, with the same arguments (R10)
                call_tool(client, run_id, step["tool"], step["args"])
        except ToolNeedsHuman as exc:
            print(f"commit step needs a person: {exc} (agentsaga settle)", flush=True)
            return 1
        except ToolCallError as exc:
            print(f"commit step failed: {exc}", flush=True)
            client.end_run(run_id, "Failed")
            return 1
        client.end_run(run_id, "Succeeded")
        print(f"run {run_id} succeeded: the receipt went out once", flush=True)
        return 0


def stopped(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stopped)
    run_ids = sys.argv[1:] or [os.environ.get("EXAMPLE_RUN_ID", "")]
    if len(run_ids) != 1 or not run_ids[0]:
        sys.exit("usage: python agent.py RUN_ID (or EXAMPLE_RUN_ID=RUN_ID python agent.py)")
    code = main(run_ids[0])
    if os.environ.get("EXAMPLE_STAY") == "1":
        print(f"run {run_ids[0]} done (exit {code}); staying until stopped", flush=True)
        threading.Event().wait()
    sys.exit(code)
