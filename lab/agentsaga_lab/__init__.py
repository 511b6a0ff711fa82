"""The lab: everything that shows or measures agentsaga but never runs in production.

    world    stand-ins of Stripe, Jira, Zendesk, an email API and a warehouse, with faults
    demo     the refund-and-reship incident, naive harness against the sidecar
    chaos    seeded fault-injection campaigns checked against the world's ground truth
    bench    overhead, peers, throughput, memory and reconcile at scale

The lab depends on the product (`agentsaga`); the product never imports the lab. Its commands
join the `agentsaga` command through the `agentsaga.commands` entry point (`COMMANDS` below).
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "world": ("agentsaga_lab.world.cli", "serve stand-ins of Stripe, Jira, Zendesk, email and a "
              "warehouse, with fault injection"),
    "chaos": ("agentsaga_lab.chaos.cli",
              "run a seeded fault-injection campaign and check invariants"),
    "bench": ("agentsaga_lab.bench.cli",
              "measure dispatch overhead, peers, throughput and reconcile"),
    "demo": ("agentsaga_lab.demo.cli",
             "replay the refund-and-reship incident: naive vs agentsaga"),
}
"""name -> (module, one-line help), as the product's own commands are listed."""
