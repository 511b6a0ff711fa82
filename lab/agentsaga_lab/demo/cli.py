"""`agentsaga demo [--json] [--dsn DSN]`: exit 0 only when agentsaga got the incident exactly
right and the naive harness reproduced the essay's failures."""

from __future__ import annotations

import argparse
import json
import logging

from agentsaga_lab.demo import story
from agentsaga_lab.demo.incident import run_both
from agentsaga_lab.demo.report import EXPECTED_AGENTSAGA, EXPECTED_NAIVE, log_table, table


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    parser.add_argument("--dsn", help="Postgres for the saga log (default: an embedded one in "
                        "a temporary directory)")
    parser.add_argument("--agent", choices=("plain", "openai-agents", "langgraph"),
                        default="plain", help="tell the incident through an agent framework "
                        "(a scripted model, the world's MCP server behind the sidecar's MCP "
                        "endpoint) instead of the plain client (default)")


def run(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(logging.WARNING)
    if args.agent != "plain":
        return run_framework_demo(args)
    naive, saga = run_both(args.dsn)
    ok = saga.outcome == EXPECTED_AGENTSAGA and naive.outcome == EXPECTED_NAIVE
    if args.json:
        print(json.dumps({"naive": naive.outcome, "agentsaga": saga.outcome, "ok": ok,
                          "agentsaga_log": saga.steps, "agentsaga_unwind": saga.unwind,
                          "naive_rollback": naive.notes, "agentsaga_notes": saga.notes},
                         indent=2, default=str))
        return 0 if ok else 1
    corrections = saga.unwind.get("corrections", [])
    print(story.SETUP, "\n")
    print(story.naive_story(naive.outcome, naive.notes), "\n")
    print(story.agentsaga_story(saga.outcome, saga.notes, corrections), "\n")
    print(table(naive.outcome, saga.outcome), "\n")
    print("agentsaga saga log:")
    print(log_table(saga.steps), "\n")
    for c in corrections:
        print(f"correction for step {c['step_idx']} {c['tool']}: {c['state']} "
              f"(audience {','.join(c['audience'])})")
    print()
    print(story.LEGEND)
    print("\nagentsaga outcome is exactly right" if saga.outcome == EXPECTED_AGENTSAGA
          else "\nagentsaga outcome is NOT right")
    if naive.outcome != EXPECTED_NAIVE:
        print("the naive harness did not reproduce the essay's failures")
    print()
    print(story.NEXT)
    return 0 if ok else 1


def run_framework_demo(args: argparse.Namespace) -> int:
    from agentsaga_lab.demo.frameworks.runner import run_framework

    for noisy in ("httpx", "httpx2", "mcp", "stripe", "pgserver", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    result = run_framework(args.agent, args.dsn)
    ok = result.outcome == EXPECTED_AGENTSAGA
    if args.json:
        print(json.dumps({"agent": result.agent, "agentsaga": result.outcome, "ok": ok,
                          "calls": result.calls, "final": result.final,
                          "agentsaga_unwind": result.unwind}, indent=2, default=str))
        return 0 if ok else 1
    print(f"The refund-and-reship run through {args.agent}, a scripted model, the world's MCP "
          "server behind the sidecar.\n")
    for n, call in enumerate(result.calls, 1):
        print(f"{n:>2}. {call['tool']:<14} -> {call['saw']}")
    print(f"model: {result.final}\n")
    # the left column: what `agentsaga demo` gets with agentsaga's own client; the right one:
    # the same incident told through the framework
    print(table(EXPECTED_AGENTSAGA, result.outcome, titles=("client", args.agent)))
    print(f"\nground truth through {args.agent} is the client's" if ok
          else f"\nground truth through {args.agent} is NOT the client's")
    return 0 if ok else 1
